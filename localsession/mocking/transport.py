"""The in-process carrier: a botocore request, answered by the ``serve`` ASGI app, no socket.

:class:`AsgiBridge` owns one event-loop thread per mock. A botocore ``AWSPreparedRequest`` is
turned into an ASGI ``http`` call on the same Starlette app that ``localsession serve`` runs
(``localsession.server.app.create_app``), scheduled on that loop, and the app's answer comes
back as a botocore ``AWSResponse``. So the mock and the server share every handler, the
long-poll included; only the bytes' carrier differs (docs/wire.md#1; docs/architecture.md,
"Three carriers").

The loop thread is the app's only event loop: long-polls wait on it without holding a
thread, and the app's ``run_in_threadpool`` calls run on anyio worker threads bound to it.
:meth:`AsgiBridge.close` cancels whatever is still in flight, ends the loop and joins the loop
thread and those workers.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

#: How long one in-process request may take before the caller gets an error; the SDK's own
#: read timeout is 60 s, and the app's long-poll answers well within it.
REQUEST_TIMEOUT_S = 300.0


class _RawBody(io.BytesIO):
    """The ``raw`` of an ``AWSResponse``: botocore reads it with ``stream()`` (and
    ``read()`` for streaming bodies such as S3 objects and event streams)."""

    def stream(self, amt: int = 65536, decode_content: bool = False) -> Iterator[bytes]:
        while chunk := self.read(amt):
            yield chunk


def _body_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if hasattr(body, "read"):  # a streaming upload (S3 PutObject of a file)
        data = body.read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return bytes(body)


def _scope(method: str, url: str, headers: Any, body: bytes) -> dict[str, Any]:
    """The ASGI ``http`` scope of one request, as uvicorn would build it."""
    parts = urlsplit(url)
    raw_headers: list[tuple[bytes, bytes]] = []
    seen_host = False
    for name, value in headers.items():
        key = name.lower() if isinstance(name, str) else name.decode("latin-1").lower()
        seen_host = seen_host or key == "host"
        raw_value = value if isinstance(value, bytes) else str(value).encode("latin-1")
        raw_headers.append((key.encode("latin-1"), raw_value))
    if not seen_host:
        raw_headers.append((b"host", parts.netloc.encode("latin-1")))
    if not any(k == b"content-length" for k, _ in raw_headers) and body:
        raw_headers.append((b"content-length", str(len(body)).encode()))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method.upper(),
        "scheme": parts.scheme or "https",
        "path": unquote(parts.path or "/"),
        "raw_path": (parts.path or "/").encode("latin-1"),
        "query_string": parts.query.encode("latin-1"),
        "root_path": "",
        "headers": raw_headers,
        "server": (parts.hostname or "localhost", port),
        "client": ("127.0.0.1", 0),
    }


class AsgiBridge:
    """An ASGI app on its own event-loop thread, called synchronously from any thread."""

    def __init__(self, app: Any, name: str) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()  # a socketpair for its self-pipe; no network
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    # -- the loop thread -------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            # One root task for the loop's life: anyio ties its worker threads to it, and
            # stops them when it ends.
            self._loop.run_until_complete(self._main())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _call(self, scope: dict[str, Any], body: bytes) -> tuple[int, list[Any], bytes]:
        sent = False
        status = 500
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the request is complete; wait until cancelled
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        await self._app(scope, receive, send)
        return status, headers, b"".join(chunks)

    # -- callers ---------------------------------------------------------------------------

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def request(self, method: str, url: str, headers: Any, body: Any) -> Any:
        """Answer one request through the app; returns a botocore ``AWSResponse``."""
        from botocore.awsrequest import AWSResponse

        if self._loop.is_closed() or not self._thread.is_alive():
            raise RuntimeError(f"the localsession mock serving {url} has exited")
        data = _body_bytes(body)
        coro = self._call(_scope(method, url, headers, data), data)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        status, raw_headers, payload = future.result(REQUEST_TIMEOUT_S)
        response_headers: dict[str, str] = {}
        for key, value in raw_headers:
            name, text = key.decode("latin-1"), value.decode("latin-1")
            response_headers[name] = (
                f"{response_headers[name]}, {text}" if name in response_headers else text
            )
        return AWSResponse(url, status, response_headers, _RawBody(payload))

    def close(self) -> None:
        """Cancel what is in flight, end the loop, join the loop thread and its workers."""
        if self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass  # already closed
        self._thread.join(timeout=30.0)
        for worker in list(threading.enumerate()):
            if getattr(worker, "loop", None) is self._loop and worker is not self._thread:
                worker.join(timeout=10.0)


def gone(url: str, event_name: str) -> Any:
    """The answer to a request for a mock that has exited: its sessions no longer exist, so
    the service's not-found error (which the SDK's automatic stop of a forgotten client
    takes quietly), naming what happened and what to do."""
    from botocore.awsrequest import AWSResponse

    from localsession.runtime import errors
    from localsession.server import wire

    service = event_name.split(".")[1] if event_name.count(".") >= 2 else ""
    runtime = service != "sagemaker"
    error = errors.not_found(
        f"{url}: the localsession.mock() this client was made in has exited, and its "
        "sessions with it; make clients inside the `with localsession.mock():` block that "
        "uses them",
        runtime=runtime,
    )
    response = wire.error(error, "rest-json" if runtime else "json")
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in response.raw_headers}
    return AWSResponse(url, response.status_code, headers, _RawBody(bytes(response.body)))
