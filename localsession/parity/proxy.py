"""``localsession record``: a recording proxy in front of the real service (or any server).

The unmodified SDK is pointed at the proxy exactly as at ``localsession serve`` (the same
printed exports). Each request is forwarded to its upstream:

- ``/v1/training-sessions/...`` (the runtime) to the runtime upstream;
- ``/s3/...`` (artifacts, path-style) to the S3 upstream, without the ``/s3`` prefix when
  that upstream is given on its own;
- everything else (the control plane, model registry, Hub) to the control-plane upstream.

``--upstream aws`` means the service's own endpoints for ``--region``. The client's
signature is discarded: the request is signed again with SigV4 for the upstream, by
botocore's signer (``SigV4Auth``; ``S3SigV4Auth`` for S3), with the credentials botocore's
default chain finds for the user (environment, profile, SSO, instance role). Then request
and response are normalised (normalise.py) and appended to the run's cassette
(cassette.py). Headers are not written (bar content type and ``X-Amz-Target``); the user's
access key, secret and session token, and every access key a client signed with, are
scrubbed from what is.
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localsession.parity.asgi import read_request, send_response
from localsession.parity.cassette import CassetteWriter, request_record, response_record
from localsession.parity.compare import DEFAULT_TOLERANCES
from localsession.parity.normalise import Normaliser, add_secret

#: Headers a forwarded request drops: the client's signature, and what the transport sets.
DROPPED = frozenset(
    {
        "host",
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-content-sha256",
        "content-length",
        "connection",
        "transfer-encoding",
        "expect",
    }
)
#: Response headers not passed back (the proxy's own transport sets them).
HOP_BY_HOP = frozenset({"connection", "transfer-encoding", "content-length", "keep-alive"})
UPSTREAM_TIMEOUT_S = 600.0


def aws_upstreams(region: str) -> dict[str, str]:
    """The service's own endpoints in ``region`` (docs/wire.md#1)."""
    return {
        "control": f"https://api.sagemaker.{region}.amazonaws.com",
        "runtime": f"https://training-session-runtime.sagemaker.{region}.api.aws",
        "s3": f"https://s3.{region}.amazonaws.com",
    }


@dataclass
class Upstreams:
    """Where each part of the API goes. ``s3`` None: S3 goes to ``control`` with its
    ``/s3`` prefix kept (another localsession serve answers it there)."""

    control: str
    runtime: str
    s3: str | None = None

    @classmethod
    def parse(
        cls, upstream: str, region: str, runtime: str | None = None, s3: str | None = None
    ) -> Upstreams:
        if upstream == "aws":
            real = aws_upstreams(region)
            return cls(real["control"], runtime or real["runtime"], s3 or real["s3"])
        for url in (upstream, runtime, s3):
            if url is not None and urlsplit(url).scheme not in ("http", "https"):
                problem = (
                    f"--upstream {url!r}: give an http(s) URL (e.g. http://127.0.0.1:8080) "
                    "or `aws` for the service's own endpoints in --region"
                )
                raise ValueError(problem)
        return cls(upstream.rstrip("/"), (runtime or upstream).rstrip("/"), s3)

    def route(self, path: str) -> tuple[str, str, str]:
        """(base URL, path to send, signing service) for a request path."""
        if path == "/s3" or path.startswith("/s3/"):
            if self.s3 is not None:
                return self.s3.rstrip("/"), path[3:] or "/", "s3"
            return self.control, path, "s3"
        if path.startswith("/v1/training-sessions"):
            return self.runtime, path, "sagemaker"
        return self.control, path, "sagemaker"


def _scope(authorization: str | None) -> tuple[str | None, str | None, str | None]:
    """(access key, region, service) of a SigV4 ``Authorization`` header."""
    import re

    if not authorization:
        return None, None, None
    match = re.search(r"Credential=([^/,\s]+)/\d{8}/([a-z0-9-]+)/([a-zA-Z0-9-]+)/", authorization)
    return (match[1], match[2], match[3]) if match else (None, None, None)


@dataclass
class RecordingProxy:
    """Forwards, re-signs and records; :meth:`app` is its ASGI app."""

    upstreams: Upstreams
    out: Path
    #: botocore ``Credentials`` to sign with; None forwards unsigned (e.g. to a local serve).
    credentials: Any = None
    region: str = "us-west-2"
    norm: Normaliser = field(init=False)
    writer: CassetteWriter = field(init=False)

    def __post_init__(self) -> None:
        frozen = self.credentials.get_frozen_credentials() if self.credentials else None
        secrets = [frozen.access_key, frozen.secret_key, frozen.token or ""] if frozen else []
        self.norm = Normaliser(secrets)
        self._mutex = threading.Lock()
        self._written: set[str] = set()
        self.writer = CassetteWriter(
            self.out,
            {
                "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "upstream": urlsplit(self.upstreams.control).netloc,
                "region": self.region,
                "tolerances": DEFAULT_TOLERANCES,
            },
        )

    # -- one exchange ----------------------------------------------------------------------

    def forward(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        raw: bytes,
        raw_path: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Forward one request (``path`` decoded, ``raw_path`` as sent); record it."""
        lower = {k.lower(): v for k, v in headers.items()}
        key, region, service = _scope(lower.get("authorization"))
        with self._mutex:
            add_secret(self.norm, key)
            request = request_record(self.norm, method, path, query, headers, raw)
        base, upstream_path, default_service = self.upstreams.route(raw_path or path)
        url = base + upstream_path + (f"?{query}" if query else "")
        sent = {k: v for k, v in lower.items() if k not in DROPPED}
        sent = self._sign(method, url, sent, raw, service or default_service, region)
        status, out, body = self._send(method, url, sent, raw)
        with self._mutex:
            response = response_record(self.norm, status, out, body)
            self.writer.exchange(request, response, self._new_values)
        return status, {k: v for k, v in out.items() if k.lower() not in HOP_BY_HOP}, body

    def _new_values(self) -> dict[str, str]:
        fresh = {k: v for k, v in self.norm.examples.items() if k not in self._written}
        self._written.update(fresh)
        return fresh

    def _sign(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        raw: bytes,
        service: str,
        region: str | None,
    ) -> dict[str, str]:
        if self.credentials is None:
            return headers
        from botocore.auth import S3SigV4Auth, SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=raw, headers=headers)
        signer = S3SigV4Auth if service == "s3" else SigV4Auth
        signer(self.credentials.get_frozen_credentials(), service, region or self.region).add_auth(
            request
        )
        return {k: str(v) for k, v in request.headers.items()}

    def _send(
        self, method: str, url: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url, data=raw or None, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_S) as reply:
                return reply.status, dict(reply.headers.items()), reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers.items()), exc.read()
        except (urllib.error.URLError, OSError) as exc:
            import json

            message = f"localsession record: upstream {url} unreachable: {exc}"
            print(message, file=sys.stderr, flush=True)
            body = json.dumps({"__type": "ServiceUnavailable", "message": message}).encode()
            return 503, {"content-type": "application/x-amz-json-1.1"}, body

    # -- ASGI ------------------------------------------------------------------------------

    def app(self) -> Any:
        from starlette.concurrency import run_in_threadpool

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            headers, query, request_body = await read_request(scope, receive)
            raw_path = scope.get("raw_path", b"").decode("latin-1") or None
            status, out, body = await run_in_threadpool(
                self.forward,
                scope["method"],
                scope["path"],
                query,
                headers,
                request_body,
                raw_path,
            )
            await send_response(send, status, {k.lower(): v for k, v in out.items()}, body)

        return app

    def close(self) -> None:
        self.writer.close()


def user_credentials(profile: str | None = None) -> Any:
    """The credentials botocore's default chain finds (None where it finds none)."""
    import botocore.session

    session = botocore.session.Session(profile=profile)
    return session.get_credentials()
