"""Running the parity servers: ``localsession record`` (the recording proxy) and
``localsession serve --replay`` (answers from a cassette), in the foreground or on a
thread (tests)."""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from localsession.parity.proxy import RecordingProxy, Upstreams, user_credentials
from localsession.parity.replay import Replayer, replay_app
from localsession.server.runner import bind, client_env, url_of
from localsession.server.startup import StartupError, bind_or_explain


@dataclass
class RecordOptions:
    upstream: str
    out: Path
    host: str = "127.0.0.1"
    port: int = 8081
    region: str = "us-west-2"
    upstream_runtime: str | None = None
    upstream_s3: str | None = None
    profile: str | None = None
    #: Forward the client's requests unsigned (an upstream that checks no signature).
    no_sign: bool = False


def _uvicorn(app: Any) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    return uvicorn.Server(config)


def build_proxy(options: RecordOptions, credentials: Any = None) -> RecordingProxy:
    """The proxy ``options`` describe; raises StartupError naming the fix."""
    try:
        upstreams = Upstreams.parse(
            options.upstream, options.region, options.upstream_runtime, options.upstream_s3
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if credentials is None and not options.no_sign:
        credentials = user_credentials(options.profile)
        if credentials is None:
            raise StartupError(
                "no AWS credentials found to sign the upstream requests with: configure them "
                "(aws configure, AWS_PROFILE, environment variables), or pass --no-sign for "
                "an upstream that checks no signature"
            )
    return RecordingProxy(upstreams, Path(options.out), credentials, options.region)


def record(options: RecordOptions) -> int:
    """``localsession record``: run the proxy in the foreground until Ctrl-C."""
    sock = bind_or_explain(options.host, options.port)
    try:
        proxy = build_proxy(options)
    except BaseException:
        sock.close()
        raise
    url = url_of(sock)
    print(f"localsession recording on {url} -> {proxy.upstreams.control}; Ctrl-C stops it")
    print(f"# cassette: {proxy.writer.path}")
    print("# point the SageMaker SDK here (your own credentials stay in your environment:")
    print("# the proxy re-signs every request with them, and writes none of them):")
    for key, value in client_env(url, options.region).items():
        if key.startswith("AWS_ACCESS_KEY_ID") or key.startswith("AWS_SECRET"):
            continue
        print(f"export {key}={shlex.quote(value)}")
    server = _uvicorn(proxy.app())
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
        sock.close()
        print(f"recorded {proxy.writer.count} exchanges to {proxy.writer.path}", flush=True)
    return 0


def serve_replay(location: Path, host: str, port: int) -> int:
    """``localsession serve --replay``: answer from a cassette in the foreground."""
    from localsession.parity.cassette import CassetteError

    try:
        replayer = Replayer.from_path(location)
    except CassetteError as exc:
        raise StartupError(str(exc)) from None
    sock = bind_or_explain(host, port)
    url = url_of(sock)
    region = str(replayer.cassette.header.get("region") or "us-west-2")
    print(
        f"localsession replaying {replayer.cassette.path} "
        f"({len(replayer.cassette.exchanges)} exchanges) on {url}; Ctrl-C stops it"
    )
    print("# point the SageMaker SDK here:")
    for key, value in client_env(url, region).items():
        print(f"export {key}={shlex.quote(value)}")
    server = _uvicorn(replay_app(replayer))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        unused = len(replayer.cassette.exchanges) - len(replayer.used)
        print(
            f"replay stopped: {len(replayer.used)} exchanges replayed, {unused} not, "
            f"{len(replayer.misses)} requests unmatched",
            flush=True,
        )
    return 1 if replayer.misses else 0


class AppThread:
    """An ASGI app on port 0 on a background thread: ``with AppThread(app) as url: ...``."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        self._sock = bind(host, 0)
        self.url = url_of(self._sock)
        self._server = _uvicorn(app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> str:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the server on {self.url} failed to start")
            threading.Event().wait(0.01)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10.0)
        self._sock.close()
