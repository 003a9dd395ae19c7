"""The two ends of a bare ASGI exchange that the recording proxy and the replay app share:
read a whole HTTP request, send a whole response."""

from __future__ import annotations

from typing import Any


async def read_request(scope: dict[str, Any], receive: Any) -> tuple[dict[str, str], str, bytes]:
    """An HTTP request's headers, query string and whole body."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    query = scope.get("query_string", b"").decode("latin-1")
    return headers, query, b"".join(chunks)


async def send_response(send: Any, status: int, headers: dict[str, str], body: bytes) -> None:
    """Send ``status``, ``headers`` (plus the body's length) and ``body``."""
    raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
