"""Running the parity servers: ``localsession record`` (the recording proxy) and
``localsession serve --replay`` (answers from a cassette), in the foreground or on a
thread (tests).

Both print the exports ``serve`` prints: the SDK's endpoints and region, the Tinker SDK's
URL and key, and ``HF_HUB_CACHE``/``HF_HUB_OFFLINE``, a cache under ``--home`` into which
the tokenizers of the built-in models and of ``--model-map`` names are exported (as
``serve`` does), so the SDK's ``get_tokenizer()`` works offline. ``serve --replay``
honours ``--host`` (with the warning for a non-loopback address), ``--auth``, ``--home``,
``--model-map`` and ``--quiet``, logs one line per request (a mismatch as an error, with
its message), and refuses by name the options that shape a live service.
"""

from __future__ import annotations

import functools
import logging
import shlex
import sys
import threading
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localsession.parity.proxy import RecordingProxy, Upstreams, user_credentials
from localsession.parity.replay import Replayer, replay_app
from localsession.server.endpoints import client_env
from localsession.server.hosting import url_of, uvicorn_server
from localsession.server.serve import ServeOptions
from localsession.server.startup import StartupError, bind_or_explain

logger = logging.getLogger("localsession.parity")

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
    #: Where the exported tokenizers go (``<home>/hf-hub``; default: localsession's home).
    home: Path | None = None
    #: ``NAME=TARGET`` entries: also export a tokenizer under each NAME (a service model id).
    model_map: list[str] = field(default_factory=list)


def tokenizer_cache(home: Path | None, model_map: Sequence[str]) -> Path:
    """The Hugging Face cache ``<home>/hf-hub`` that the SDK's ``get_tokenizer()`` reads
    (the one ``serve`` on that home fills), filled on a background thread with the
    tokenizers of every model the catalog lists, ``--model-map`` names among them. Raises
    StartupError for a malformed or unresolvable ``--model-map``."""
    from localsession import wiring
    from localsession.runtime.models import hub
    from localsession.runtime.models.sources import localsession_home
    from localsession.server.startup import check_model_map, check_model_map_flags

    mapping = check_model_map_flags(model_map)
    root = (home.expanduser() if home else localsession_home()).absolute()
    catalog = wiring.server_catalog(root, mapping)
    check_model_map(catalog, mapping)
    cache = root / hub.HUB_CACHE_DIR
    threading.Thread(target=hub.export_all, args=(catalog, cache), daemon=True).start()
    return cache


def exports(
    url: str, region: str, cache: Path, tinker_key: str, *, credentials: bool = True
) -> dict[str, str]:
    """The ``export`` lines of ``serve`` for a server at ``url``; ``credentials=False``
    leaves out the access key and secret (the caller's own stay in effect)."""
    env = {
        k: v
        for k, v in client_env(url, region).items()
        if credentials or not k.startswith(("AWS_ACCESS_KEY_ID", "AWS_SECRET"))
    }
    env["HF_HUB_CACHE"] = str(cache.resolve())
    env["HF_HUB_OFFLINE"] = "1"
    env["TINKER_BASE_URL"] = url
    env["TINKER_API_KEY"] = tinker_key
    return env


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
    cache = tokenizer_cache(options.home, options.model_map)
    sock = bind_or_explain(options.host, options.port)
    try:
        proxy = build_proxy(options)
    except BaseException:
        sock.close()
        raise
    url = url_of(sock)
    say(f"localsession recording on {url} -> {proxy.upstreams.control}; Ctrl-C stops it")
    say(f"# cassette: {proxy.writer.path}")
    say("# point the SageMaker SDK here (your own credentials stay in your environment:")
    say("# the proxy re-signs every request with them, and writes none of them), and its")
    say("# get_tokenizer() at the exported tokenizers (map a service model id to a local")
    say("# model with --model-map NAME=TARGET to get its tokenizer there):")
    key = "tml-<your upstream's key>" if not options.no_sign else "tml-localsession"
    for name, value in exports(url, options.region, cache, key, credentials=False).items():
        if name == "TINKER_BASE_URL":
            say("# the tinker SDK, for an upstream URL that speaks it (a local serve):")
        say(f"export {name}={shlex.quote(value)}")
    try:
        uvicorn_server(proxy.app()).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
        sock.close()
        say(f"recorded {proxy.writer.count} exchanges to {proxy.writer.path}")
    return 0


#: ``serve`` options that shape a live service, which a replay does not run: refused by
#: name when given (option -> (ServeOptions field, why)).
REFUSED = {
    "--relaxed": ("relaxed", "the recorded service's answers decide what is refused"),
    "--max-sessions": ("max_sessions", "the recording decides how many sessions exist"),
    "--gap-timeout": ("gap_timeout", "a replay runs no operations to order"),
    "--idle-timeout": ("idle_timeout", "a replay runs no sessions to expire"),
    "--lenient-sequence": ("lenient_sequence", "a replay runs no operations to order"),
    "--max-queued-ops": ("max_queued_ops", "a replay queues nothing"),
}


def check_replay_options(options: ServeOptions) -> None:
    """Refuse, naming it, a ``serve`` option that has no meaning under ``--replay``."""
    from localsession.server.app import LONG_POLL_SECONDS, SUBMIT_HOLD_SECONDS

    given = [(option, why) for option, (name, why) in REFUSED.items() if getattr(options, name)]
    if options.long_poll != LONG_POLL_SECONDS:
        given.append(("--long-poll", "a replay answers every poll at once"))
    if options.submit_hold != SUBMIT_HOLD_SECONDS:
        given.append(("--submit-hold", "a replay answers every submit at once"))
    if given:
        option, why = given[0]
        raise StartupError(
            f"{option} has no effect with --replay ({why}); drop it, or serve live sessions "
            "without --replay"
        )


@dataclass
class ReplaySetup:
    """What ``serve --replay`` checked and built before it binds."""

    replayer: Replayer
    #: The replay app behind the request guard (body limit; SigV4 with ``--auth``) and
    #: the request log.
    app: Any
    credential: Any
    cache: Path
    region: str

    def exports(self, url: str) -> dict[str, str]:
        """``serve``'s export lines for a replay at ``url``."""
        shown = "<the SECRET given to --auth>"
        env = exports(url, self.region, self.cache, f"tml-{shown}" if self.credential else
                      "tml-localsession")  # fmt: skip
        if self.credential is not None:  # the secret is the user's own; it is not echoed
            env["AWS_ACCESS_KEY_ID"] = self.credential.access_key
            env["AWS_SECRET_ACCESS_KEY"] = shown
        return env


def replay_setup(options: ServeOptions) -> ReplaySetup:
    """Check ``serve --replay``'s options, load the cassette, export the tokenizers and
    build the app; raises StartupError naming the fix."""
    from localsession.parity.cassette import CassetteError
    from localsession.server.auth import Credential, RequestGuard

    assert options.replay is not None
    check_replay_options(options)
    try:
        credential = Credential.parse(options.auth) if options.auth else None
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    try:
        replayer = Replayer.from_path(options.replay)
    except CassetteError as exc:
        raise StartupError(str(exc)) from None
    cache = tokenizer_cache(options.home, options.model_map)
    region = str(replayer.cassette.header.get("region") or "us-west-2")
    replayer.on_answer = _log_answer
    app = ReplayLog(RequestGuard(replay_app(replayer), credential=credential))
    return ReplaySetup(replayer, app, credential, cache, region)


#: What the replay made of the request being answered: (recorded exchange number,
#: mismatch message); set by the replayer's callback, read by :class:`ReplayLog` in the
#: same task.
_note: ContextVar[tuple[int | None, str | None]] = ContextVar("replay", default=(None, None))


def _log_answer(request: str, status: int, number: int | None, miss: str | None) -> None:
    _note.set((number, miss))


class ReplayLog:
    """ASGI middleware: one line per request, ``POST / (target) -> 200, recorded #3`` at
    INFO (a refusal by ``--auth`` too), ``MISMATCH POST ... -> 400: <why>`` at ERROR."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = [500]

        async def record(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        target = dict(scope.get("headers") or []).get(b"x-amz-target", b"").decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        request = scope.get("method", "?") + " " + scope["path"] + (f"?{query}" if query else "")
        _note.set((None, None))
        try:
            await self.app(scope, receive, record)
        finally:
            shown = f"{request} ({target})" if target else request
            number, miss = _note.get()
            if miss is not None:
                logger.error("MISMATCH %s -> %d: %s", shown, status[0], miss)
            elif number is not None:
                logger.info("%s -> %d, recorded #%d", shown, status[0], number)
            else:  # refused before the replay (--auth, the body limit)
                logger.info("%s -> %d", shown, status[0])


def _log_requests(quiet: bool) -> None:
    """One line per request on stderr (INFO), mismatches always (ERROR)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def serve_replay(options: ServeOptions) -> int:
    """``localsession serve --replay``: answer from a cassette in the foreground."""
    from localsession.server.startup import warn_if_exposed

    setup = replay_setup(options)
    replayer = setup.replayer
    sock = bind_or_explain(options.host, options.port)
    warn_if_exposed(options.host, setup.credential is not None)
    url = url_of(sock)
    say(
        f"localsession replaying {replayer.cassette.path} "
        f"({len(replayer.cassette.exchanges)} exchanges) on {url}; Ctrl-C stops it"
    )
    say("# point the SageMaker SDK (and the tinker SDK) here:")
    for key, value in setup.exports(url).items():
        say(f"export {key}={shlex.quote(value)}")
    _log_requests(options.quiet)
    server = uvicorn_server(setup.app)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        unused = len(replayer.cassette.exchanges) - len(replayer.used)
        say(
            f"replay stopped: {len(replayer.used)} exchanges replayed, {unused} not, "
            f"{len(replayer.misses)} requests unmatched"
        )
    return 1 if replayer.misses else 0
