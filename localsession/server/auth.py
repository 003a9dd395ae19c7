"""Request admission for the server: the body-size limit, and optional AWS SigV4 checks.

:class:`RequestGuard` is a pure ASGI middleware in front of every route. For each HTTP request:

1. A ``Content-Length`` over :data:`MAX_BODY_BYTES` (64 MiB) is refused at once with 413 and a
   ``ValidationException`` naming the limit; the body is then read in chunks, counting bytes,
   so a chunked body or one that outgrows its ``Content-Length`` is refused the same way as
   soon as it passes the limit. The connection is closed after such a refusal; the server
   stays up.
2. With credentials configured (``localsession serve --auth ACCESS_KEY:SECRET``), the request
   must carry an ``Authorization: AWS4-HMAC-SHA256 ...`` header whose signature matches the one
   botocore's own signer (``botocore.auth.SigV4Auth``) computes for the same method, path,
   query, signed headers, timestamp and body with that secret. Nothing is hand-rolled: the
   canonical request, the string to sign and the signing key all come from botocore.
   Refusals use the codes AWS answers with, all HTTP 403:

   - no ``Authorization`` header: ``MissingAuthenticationTokenException``;
   - a header that is not a well-formed SigV4 one: ``IncompleteSignatureException``;
   - an access key other than the configured one: ``UnrecognizedClientException``;
   - a signature that does not match, or a timestamp over 15 minutes off:
     ``InvalidSignatureException``.

   The OpenAI-compatible routes (``/v1/chat/completions``, ``/v1/models``), whose clients
   cannot sign, accept ``Authorization: Bearer <SECRET>`` instead; the Tinker routes
   (``/api/v1/...``) take the Tinker API key ``X-API-Key: tml-<SECRET>``, and Tinker's
   OpenAI-compatible routes (``/oai/api/v1/...``) the same key as ``Authorization: Bearer
   tml-<SECRET>``. A wrong or missing API key or bearer is HTTP 401 (as Tinker and OpenAI
   answer it: the SDKs raise ``AuthenticationError``). S3 requests (scope
   service ``s3``) are checked with botocore's ``S3SigV4Auth``, and their
   ``x-amz-content-sha256`` must be the body's hash. The console (``/console``) takes the
   Tinker key as a bearer token, or a signed link (server/console/access.py).
   ``/_localsession/health`` alone is open:
   it answers ``{"status": "ok"}`` and nothing else.

The body is handed on to the route unchanged (replayed from the buffer), so routes read it as
usual. Errors are encoded by :mod:`localsession.server.wire`: json 1.1 for ``POST /``,
rest-json everywhere else.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.auth import SIGV4_TIMESTAMP, UNSIGNED_PAYLOAD, S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localsession import vocab
from localsession.runtime.errors import ServiceError
from localsession.server import wire
from localsession.server.console import access

#: The largest request body accepted (docs/wire.md#4 rule 12: at least 64 MB).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: How far a request's ``X-Amz-Date`` may be from the server's clock (AWS allows 15 min).
MAX_CLOCK_SKEW = timedelta(minutes=15)
#: Paths whose clients send ``Authorization: Bearer <key>`` (the OpenAI client).
BEARER_PATHS = ("/v1/chat/completions", "/v1/models")
#: Tinker's OpenAI-compatible routes: ``Authorization: Bearer tml-<SECRET>`` (the Tinker key).
TINKER_BEARER_PREFIX = "/oai/api/v1/"
#: The one path served without credentials (a liveness probe that reveals nothing).
OPEN_PATHS = ("/_localsession/health",)

_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+"
    r"Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)/"
    r"(?P<service>[a-zA-Z0-9-]+)/aws4_request,\s*"
    r"SignedHeaders=(?P<headers>[a-z0-9;._-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})\s*\Z"
)


@dataclass(frozen=True)
class Credential:
    """The one access key the server accepts, and its secret."""

    access_key: str
    secret_key: str

    @classmethod
    def parse(cls, value: str) -> Credential:
        """``ACCESS_KEY:SECRET`` as given to ``--auth``."""
        key, sep, secret = value.partition(":")
        if not sep or not key or not secret:
            raise ValueError("--auth takes ACCESS_KEY:SECRET, both non-empty")
        return cls(key, secret)


_SCOPE_RE = re.compile(r"Credential=[^/,\s]+/\d{8}/(?P<region>[a-z0-9-]{1,32})/")


def scope_region(authorization: str | None) -> str | None:
    """The region of a SigV4 ``Authorization`` header's credential scope (the client's
    region: botocore signs with it), or None without a SigV4 header."""
    if not authorization or not authorization.startswith("AWS4-HMAC-SHA256"):
        return None
    match = _SCOPE_RE.search(authorization)
    return match["region"] if match else None


def _forbidden(code: str, message: str) -> ServiceError:
    return ServiceError(code, message, 403)


def _unauthorized(message: str) -> ServiceError:
    """A wrong or missing API key: HTTP 401, as Tinker and OpenAI answer it."""
    return ServiceError("InvalidApiKey", message, 401)


def _bearer(headers: list[tuple[str, str]]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None: no bearer header)."""
    given = next((v for k, v in headers if k.lower() == "authorization"), "")
    scheme, _, token = given.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def too_large(size: int | None = None) -> ServiceError:
    """The refusal of a body over the limit (HTTP 413, ValidationException)."""
    seen = f"request body of {size} bytes" if size is not None else "request body"
    return ServiceError(
        vocab.ErrorCode.VALIDATION,
        f"{seen} exceeds the {MAX_BODY_BYTES}-byte (64 MiB) limit; send fewer datums per request",
        413,
    )


def verify_sigv4(
    credential: Credential,
    method: str,
    raw_path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    now: datetime | None = None,
) -> None:
    """Raise a 403 :class:`ServiceError` unless the request carries a valid SigV4 signature
    by ``credential``, recomputed with botocore's ``SigV4Auth``."""
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(value)
    authorization = values.get("authorization")
    if not authorization:
        raise _forbidden("MissingAuthenticationTokenException", "Missing Authentication Token")
    match = _AUTH_RE.match(authorization[0])
    if match is None or len(authorization) != 1:
        raise _forbidden(
            "IncompleteSignatureException",
            "Authorization header is not a well-formed AWS4-HMAC-SHA256 signature "
            "(Credential=KEY/DATE/REGION/SERVICE/aws4_request, SignedHeaders=..., Signature=...)",
        )
    if not hmac.compare_digest(match["key"].encode(), credential.access_key.encode()):
        raise _forbidden(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    signed = match["headers"].split(";")
    stamp = (values.get("x-amz-date") or [""])[0]
    if "host" not in signed or "x-amz-date" not in signed:
        raise _forbidden(
            "IncompleteSignatureException", "SignedHeaders must include host and x-amz-date"
        )
    try:
        when = datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=timezone.utc)
    except ValueError:
        raise _forbidden(
            "IncompleteSignatureException", "X-Amz-Date must be a timestamp like 20250101T000000Z"
        ) from None
    now = now or datetime.now(timezone.utc)
    if abs(now - when) > MAX_CLOCK_SKEW or stamp[:8] != match["date"]:
        raise _forbidden(
            "InvalidSignatureException",
            f"Signature expired: {stamp} is not within 15 minutes of the server time "
            f"{now.strftime(SIGV4_TIMESTAMP)}, or its date differs from the credential scope",
        )
    signed_headers: dict[str, str] = {}
    for name in signed:
        if name not in values:
            raise _forbidden("InvalidSignatureException", f"signed header {name!r} is missing")
        signed_headers[name] = ",".join(values[name])
    host = signed_headers["host"]
    url = f"http://{host}{raw_path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=signed_headers, data=body)
    request.context["timestamp"] = stamp
    # S3 signs paths unnormalised and its payload as the x-amz-content-sha256 header says,
    # which must then be the body's hash (or UNSIGNED-PAYLOAD, which leaves it unsigned).
    s3 = match["service"] == "s3"
    sent = values.get("x-amz-content-sha256")
    declared = sent[0] if sent else None
    if (
        s3
        and declared is not None
        and declared != UNSIGNED_PAYLOAD
        and declared != hashlib.sha256(body).hexdigest()
    ):
        raise _forbidden(
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    signer = (S3SigV4Auth if s3 else SigV4Auth)(
        Credentials(credential.access_key, credential.secret_key),
        match["service"],
        match["region"],
    )
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, match["signature"]):
        raise _forbidden(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )


class RequestGuard:
    """ASGI middleware: the body limit for every request, SigV4 when ``credential`` is set."""

    def __init__(self, app: ASGIApp, credential: Credential | None = None) -> None:
        self.app = app
        self.credential = credential

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        protocol: wire.Protocol = "json" if scope["path"] == "/" else "rest-json"
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        try:
            declared = _content_length(headers)
            if declared is not None and declared > MAX_BODY_BYTES:
                raise too_large(declared)
            body = await _read_body(receive)
            if self.credential is not None:
                self._authorize(scope, headers, body)
        except ServiceError as exc:
            path = scope["path"]
            if path == "/s3" or path.startswith("/s3/"):
                response = _s3_refusal(exc, scope)
            elif exc.http_status == 401 and (
                path in BEARER_PATHS or path.startswith(TINKER_BEARER_PREFIX)
            ):
                response = _openai_refusal(exc)
            elif exc.http_status == 401:  # the Tinker SDK's error shape (server/tinker/routes)
                detail = {"detail": exc.message, "code": exc.code}
                response = Response(wire.dumps(detail), 401, media_type="application/json")
            else:
                response = wire.error(exc, protocol)
            if exc.http_status == 413:
                response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _authorize(self, scope: Scope, headers: list[tuple[str, str]], body: bytes) -> None:
        assert self.credential is not None
        if scope["path"] in OPEN_PATHS:
            return
        path = scope["path"]
        tinker_key = f"tml-{self.credential.secret_key}"
        if path.startswith(access.CONSOLE_PATH):  # the console's key (console/access)
            given = next((v for k, v in headers if k.lower() == "authorization"), "")
            query = scope.get("query_string", b"").decode("latin-1")
            if not access.allowed(self.credential.secret_key, path, query, given):
                raise _forbidden(
                    "UnrecognizedClientException",
                    "The console needs the API key: the --auth SECRET or tml-SECRET.",
                )
            return
        if path.startswith(TINKER_BEARER_PREFIX):  # Tinker's OpenAI-compatible surface
            if not _matches(_bearer(headers) or "", tinker_key):
                raise _unauthorized(
                    "The API key is invalid: send the Tinker API key as the bearer "
                    "(OpenAI(api_key='tml-<SECRET>'), the SECRET of serve --auth)."
                )
            return
        if path in BEARER_PATHS:
            token = _bearer(headers)
            if token is not None:
                if not _matches(token, self.credential.secret_key):
                    raise _unauthorized(
                        "The API key is invalid: send the SECRET of serve --auth as the bearer."
                    )
                return
        if path.startswith("/api/v1/"):  # the Tinker dialect: X-API-Key tml-SECRET
            given = next((v for k, v in headers if k.lower() == "x-api-key"), "")
            if not _matches(given.strip(), tinker_key):
                raise _unauthorized(
                    "The Tinker API key is invalid: set TINKER_API_KEY=tml-<SECRET>, the SECRET "
                    "of serve --auth ACCESS_KEY:SECRET."
                )
            return
        raw_path = scope.get("raw_path") or scope["path"].encode()
        verify_sigv4(
            self.credential,
            scope["method"],
            raw_path.decode("latin-1"),
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            body,
        )


#: The codes S3 answers the same refusals with.
_S3_CODES = {
    "MissingAuthenticationTokenException": "AccessDenied",
    "IncompleteSignatureException": "AuthorizationHeaderMalformed",
    "UnrecognizedClientException": "InvalidAccessKeyId",
    "InvalidSignatureException": "SignatureDoesNotMatch",
    vocab.ErrorCode.VALIDATION: "EntityTooLarge",
}


def _s3_refusal(exc: ServiceError, scope: Scope) -> Response:
    """A refusal of an S3 request, in S3's XML error shape (server/s3.py)."""
    from localsession.server import s3

    code = _S3_CODES.get(exc.code, exc.code) if exc.http_status in (403, 413) else exc.code
    answer = s3.error_response(
        ServiceError(code, exc.message, exc.http_status),
        scope["path"].removeprefix(s3.PREFIX) or "/",
        head=scope["method"] == "HEAD",
    )
    return Response(answer.body, answer.status, answer.headers)


def _openai_refusal(exc: ServiceError) -> Response:
    """A refused API key in OpenAI's error shape (its clients read ``error.message``)."""
    error = {"message": exc.message, "type": "invalid_request_error", "param": None}
    body = {"error": {**error, "code": "invalid_api_key"}}
    return Response(wire.dumps(body), exc.http_status, media_type="application/json")


def _content_length(headers: list[tuple[str, str]]) -> int | None:
    for name, value in headers:
        if name.lower() == "content-length":
            try:
                return int(value)
            except ValueError:
                raise ServiceError(
                    vocab.ErrorCode.VALIDATION,
                    f"Content-Length {value[:40]!r} is not a number",
                    400,
                ) from None
    return None


async def _read_body(receive: Receive) -> bytes:
    """The whole body, refusing it once it passes :data:`MAX_BODY_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message: dict[str, Any] = dict(await receive())
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
