"""Wire encoding for the server: JSON bodies and the two services' error shapes.

- The control plane speaks AWS json 1.1: errors are ``{"__type": code, "message": text}``
  with the status the runtime chose (400 for client faults).
- The runtime speaks rest-json: errors carry the code in the ``x-amzn-ErrorType`` header and
  ``{"message": text}`` in the body (docs/wire.md#4, #4).

Timestamps go out as epoch seconds, which botocore parses for both protocols.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from starlette.responses import Response

from localsession.runtime import errors
from localsession.runtime.errors import ServiceError

JSON_11 = "application/x-amz-json-1.1"
REST_JSON = "application/json"
Protocol = Literal["json", "rest-json"]


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(body: Any) -> bytes:
    return json.dumps(body, default=_encode, separators=(",", ":")).encode()


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body (empty means ``{}``); ValidationException if not."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.validation(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise errors.validation("request body is nested too deeply to parse as JSON") from None
    if not isinstance(body, dict):
        raise errors.validation("request body must be a JSON object")
    return body


def _headers(protocol: Protocol) -> dict[str, str]:
    return {
        "content-type": JSON_11 if protocol == "json" else REST_JSON,
        "x-amzn-RequestId": str(uuid.uuid4()),
    }


def ok(body: Any, protocol: Protocol) -> Response:
    return Response(dumps(body), status_code=200, headers=_headers(protocol))


def error(exc: ServiceError, protocol: Protocol) -> Response:
    headers = _headers(protocol)
    if protocol == "json":
        payload: dict[str, Any] = {"__type": exc.code, "message": exc.message}
    else:
        headers["x-amzn-ErrorType"] = exc.code
        payload = {"message": exc.message}
    return Response(dumps(payload), status_code=exc.http_status, headers=headers)
