"""Running the parity servers: ``localsession record`` (the recording proxy) and
``localsession serve --replay`` (answers from a cassette), in the foreground or on a
thread (tests)."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localsession.parity.proxy import RecordingProxy, Upstreams, user_credentials
from localsession.parity.replay import Replayer, replay_app
from localsession.server.endpoints import client_env
from localsession.server.hosting import url_of, uvicorn_server
from localsession.server.startup import StartupError, bind_or_explain

#: Every line of the banners is flushed: a supervisor or a log file sees it at once.
say = functools.partial(print, flush=True)


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
    say(
        f"localsession recording on {url} -> {proxy.upstreams.control}; Ctrl-C stops it", flush=True
    )
    say(f"# cassette: {proxy.writer.path}")
    say(
        "# point the SageMaker SDK here (your own credentials stay in your environment:", flush=True
    )
    say("# the proxy re-signs every request with them, and writes none of them):")
    for key, value in client_env(url, options.region).items():
        if key.startswith("AWS_ACCESS_KEY_ID") or key.startswith("AWS_SECRET"):
            continue
        say(f"export {key}={shlex.quote(value)}")
    server = uvicorn_server(proxy.app())
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
        sock.close()
        say(f"recorded {proxy.writer.count} exchanges to {proxy.writer.path}")
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
    say(
        f"localsession replaying {replayer.cassette.path} "
        f"({len(replayer.cassette.exchanges)} exchanges) on {url}; Ctrl-C stops it"
    )
    say("# point the SageMaker SDK here:")
    for key, value in client_env(url, region).items():
        say(f"export {key}={shlex.quote(value)}")
    server = uvicorn_server(replay_app(replayer))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        unused = len(replayer.cassette.exchanges) - len(replayer.used)
        say(
            f"replay stopped: {len(replayer.used)} exchanges replayed, {unused} not, "
            f"{len(replayer.misses)} requests unmatched",
            flush=True,
        )
    return 1 if replayer.misses else 0
