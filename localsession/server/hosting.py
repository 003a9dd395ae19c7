"""Running the server: on a thread (tests, benchmarks, the conformance suite) or in the
foreground (``localsession serve``), always on uvicorn and always on a socket bound first, so
port 0 works and the URL is known before the first request."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn

from localsession.runtime.service import Service
from localsession.server.app import LONG_POLL_SECONDS, SUBMIT_HOLD_SECONDS, create_app
from localsession.server.auth import Credential


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections: without it, a response written in two segments
    # waits out the client's delayed ACK (~40 ms per request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_server(app: Any, **config: Any) -> uvicorn.Server:
    """A quiet uvicorn server for ``app`` (``config``: more uvicorn options)."""
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
    options.update(config)
    return uvicorn.Server(uvicorn.Config(app, **options))


def make_server(
    service: Service,
    *,
    long_poll: float = LONG_POLL_SECONDS,
    submit_hold: float = SUBMIT_HOLD_SECONDS,
    credential: Credential | None = None,
    console: str | None = None,
    **config: Any,
) -> uvicorn.Server:
    """``console``: why the console is off (None: it is on; server/console/)."""
    app = create_app(
        service,
        long_poll=long_poll,
        submit_hold=submit_hold,
        credential=credential,
        console=console,
    )
    return uvicorn_server(app, **config)


class AppThread:
    """An ASGI app's server on a background thread: ``with AppThread(app) as url: ...``."""

    def __init__(self, server: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        """``server``: an ASGI app, or a ``uvicorn.Server`` already made for one."""
        self._sock = bind(host, port)
        self.url = url_of(self._sock)
        self._server = server if isinstance(server, uvicorn.Server) else uvicorn_server(server)
        self._serving = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> str:
        self._serving.start()
        while not self._server.started:
            if not self._serving.is_alive():
                raise RuntimeError(f"the server on {self.url} failed to start")
            threading.Event().wait(0.01)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._serving.join(timeout=10.0)
        self._sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerThread(AppThread):
    """A server for ``service`` on a background thread: ``with ServerThread(s) as url: ...``."""

    def __init__(
        self,
        service: Service,
        host: str = "127.0.0.1",
        port: int = 0,
        long_poll: float = LONG_POLL_SECONDS,
        credential: Credential | None = None,
        submit_hold: float = SUBMIT_HOLD_SECONDS,
    ) -> None:
        self.service = service
        server = make_server(
            service, long_poll=long_poll, submit_hold=submit_hold, credential=credential
        )
        super().__init__(server, host, port)
