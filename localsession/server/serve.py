"""The foreground server behind ``localsession serve``: check the configuration and lock the
home (server/startup.py, runtime/home.py), print how to connect,
serve until Ctrl-C, then stop every session cleanly."""

from __future__ import annotations

import functools
import logging
import shlex
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localsession import wiring
from localsession.engine_options import EngineOptions, SettingError
from localsession.runtime.home import HomeError, HomeLock, require_writable
from localsession.runtime.models.catalog import ModelCatalog
from localsession.runtime.models.sources import localsession_home, parse_map_entries
from localsession.runtime.service import Service
from localsession.server.app import LONG_POLL_SECONDS, SUBMIT_HOLD_SECONDS, check_submit_hold
from localsession.server.auth import Credential
from localsession.server.endpoints import client_env
from localsession.server.hosting import make_server, url_of
from localsession.server.startup import (
    RequestLog,
    StartupError,
    bind_or_explain,
    check_model_map,
    check_model_map_flags,
    is_loopback,
    warn_if_exposed,
)
from localsession.server.warmup import TokenizerWarmup


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    home: Path | None = None
    relaxed: bool = False
    model_map: list[str] = field(default_factory=list)
    max_sessions: int | None = None
    gap_timeout: float | None = None
    #: Seconds of inactivity before a session becomes Expired (``--idle-timeout``).
    idle_timeout: float | None = None
    heartbeat_timeout: float | None = None
    lenient_sequence: bool = False
    long_poll: float = LONG_POLL_SECONDS
    submit_hold: float = SUBMIT_HOLD_SECONDS
    max_queued_ops: int | None = None
    #: ``ACCESS_KEY:SECRET``: require SigV4 requests signed with it (server/auth.py).
    auth: str | None = None
    #: No per-request log lines (``--quiet``); warnings and errors still print.
    quiet: bool = False
    #: Answer from this cassette instead of running sessions (localsession/parity/).
    replay: Path | None = None
    #: Serve the console (/console) on a non-loopback host too (``--console``).
    console: bool = False


def build_service(
    options: ServeOptions,
    home: Path | None = None,
    *,
    catalog: ModelCatalog | None = None,
    engine: EngineOptions | None = None,
) -> Service:
    """The service a server runs: the wiring's server profile, with the command line's
    choices. ``catalog``: the one :func:`start` already built from ``--model-map`` (default:
    built by the profile from ``options.model_map``); ``engine``: the engine options
    :func:`start` read (default: the profile reads the environment)."""
    chosen = home if home is not None else options.home
    profile = wiring.ServerOptions(
        home=Path(chosen) if chosen is not None else None,
        strict=not options.relaxed,
        model_map=parse_map_entries(options.model_map, "--model-map") if catalog is None else {},
        max_sessions=options.max_sessions,
        gap_timeout=options.gap_timeout,
        idle_timeout=options.idle_timeout,
        lenient_sequence=options.lenient_sequence,
        max_queued_ops=options.max_queued_ops,
        heartbeat_timeout=options.heartbeat_timeout,
        engine=engine,
    )
    return wiring.server_service(profile, catalog=catalog)


def heartbeat_line(timeout: float) -> str:
    """What ``serve`` says about Tinker session expiry (``--heartbeat-timeout``)."""
    if timeout <= 0:
        return "tinker sessions never expire (--heartbeat-timeout 0)"
    return (
        f"a tinker session without a heartbeat for {timeout:g} s is expired, its models' "
        "sessions stopped (--heartbeat-timeout)"
    )


def serve_exports(url: str, service: Service) -> dict[str, str]:
    """What a client shell needs: the SDK/boto3/S3 endpoints and region, and localsession's
    own Hugging Face cache (``<home>/hf-hub``, offline), where the local Hub exports every
    listed model's tokenizer under the id it is listed by (runtime/models/hub.py). The user's own
    HF cache is never written."""
    env = client_env(url, service.config.region)
    env["HF_HUB_CACHE"] = str(service.hub_cache.resolve())
    env["HF_HUB_OFFLINE"] = "1"
    return env


def start(options: ServeOptions) -> tuple[Service, socket.socket, HomeLock, Credential | None]:
    """Check the configuration, lock the home, bind the port, then build the service.

    Raises :class:`StartupError` (one line naming the fix) before anything is served, and
    before the service loads, or rewrites, the home's session records.
    """
    if not 0 <= options.port <= 65535:
        raise StartupError(f"--port {options.port} is not a port: use 1-65535, or 0 for a free one")
    try:
        credential = Credential.parse(options.auth) if options.auth else None
        check_submit_hold(options.submit_hold)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    model_map = check_model_map_flags(options.model_map)
    try:
        engine = EngineOptions.from_env()  # a bad LOCALSESSION_* engine setting stops here
    except SettingError as exc:
        raise StartupError(str(exc)) from None
    home = (options.home.expanduser() if options.home else localsession_home()).absolute()
    lock = HomeLock(home)
    try:
        require_writable(home)
        lock.acquire()
    except HomeError as exc:
        raise StartupError(str(exc)) from None
    try:
        catalog = wiring.server_catalog(home, model_map)  # the one parse of --model-map
        check_model_map(catalog, model_map)
        sock = bind_or_explain(options.host, options.port)
    except BaseException:
        lock.release()
        raise
    try:
        service = build_service(options, home, catalog=catalog, engine=engine)
    except BaseException as exc:
        sock.close()
        lock.release()
        if isinstance(exc, SettingError):  # a service variable (LOCALSESSION_MAX_SESSIONS ...)
            raise StartupError(str(exc)) from None
        raise
    return service, sock, lock, credential


def serve(options: ServeOptions) -> int:
    """Run the server until Ctrl-C or SIGTERM (``--replay`` is parity/running.py's, chosen by
    the CLI)."""
    service, sock, lock, credential = start(options)
    previous = _stop_signals()
    try:
        warn_if_exposed(options.host, credential is not None)
        _print_banner(url_of(sock), service, credential)
        say_console(url_of(sock), console_off(options))
        # Tokenizers the SDKs' get_tokenizer() will read, exported before the first describe;
        # Tinker requests that lead to a tokenizer load wait for them (server/warmup.py).
        warmup = TokenizerWarmup(service.catalog, service.hub_cache)
        print(
            "# exporting tokenizers into HF_HUB_CACHE: start clients after '# ready' below "
            "(until then tinker clients are told to retry)",
            flush=True,
        )
        warmup.start(functools.partial(print, flush=True))
        _log_requests(quiet=options.quiet)
        server = make_server(
            service,
            long_poll=options.long_poll,
            submit_hold=options.submit_hold,
            credential=credential,
            console=console_off(options),
        )
        server.config.app = RequestLog(warmup.guard(server.config.app))
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn shut down gracefully, then re-raised the Ctrl-C it captured; or the Ctrl-C
        # came after the banner, while the app was being built: stopped the same way
        pass
    finally:
        try:
            service.close()
            sock.close()
            lock.release()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        print("localsession server stopped", flush=True)
    return 0


def _stop_signals() -> dict[int, Any]:
    """Make SIGTERM (``kill``, a supervisor's stop) end the server as Ctrl-C does: sessions
    stopped, home lock released, exit status 0. uvicorn takes the signal while it serves and
    raises it again once it has shut down; this handler then turns it into the
    KeyboardInterrupt that :func:`serve` handles. A SIGINT the process inherited as ignored
    (a shell script's ``serve &``) stops it too, as it would once uvicorn serves: from the
    banner on, not only after. Returns the handlers it replaced (none off the main thread,
    where signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous: dict[int, Any] = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    return previous


def _print_banner(url: str, service: Service, credential: Credential | None) -> None:
    """The URL and the exports a client shell needs."""
    # Flushed line by line: under a supervisor or with stdout sent to a file, Python buffers
    # stdout in blocks, and the URL and exports would not appear until the server exited.
    say = functools.partial(print, flush=True)
    say(f"localsession serving on {url} (home {service.config.home}); Ctrl-C stops it")
    say("# point the SageMaker SDK, boto3 or the AWS CLI here:")
    env = serve_exports(url, service)
    if credential is not None:  # the secret is the user's own; it is not echoed
        env["AWS_ACCESS_KEY_ID"] = credential.access_key
        env["AWS_SECRET_ACCESS_KEY"] = "<the SECRET given to --auth>"
    for key, value in env.items():
        say(f"export {key}={shlex.quote(value)}")
    say("# point the tinker SDK (and tinker-cookbook) here:")
    say(f"export TINKER_BASE_URL={shlex.quote(url)}")
    shown = "tml-<the SECRET given to --auth>" if credential is not None else "tml-localsession"
    say(f"export TINKER_API_KEY={shlex.quote(shown)}")
    say(f"# {heartbeat_line(service.config.heartbeat_timeout)}")
    if service.config.idle_timeout is not None:
        say(
            f"# a session with no operation for {service.config.idle_timeout:g} s becomes "
            "Expired (--idle-timeout; conformance: pass the same --idle-timeout)"
        )
    engine = service.config.engine_options or EngineOptions()
    say(f"# engine: {engine.line()} (docs/configuration.md)")
    say(
        "# and pass s3_output_path='s3://<bucket>/<prefix>' to ServiceClient (or to each "
        "create call):\n# without it the SDK derives a default bucket through STS at a fixed "
        "AWS endpoint\n# that no variable redirects, which fails offline. Packages are then "
        "served as S3\n# objects under that path (list/head/get/delete at AWS_ENDPOINT_URL_S3)."
    )


def console_off(options: ServeOptions) -> str | None:
    """Why the console is off (None: on): it is on for a loopback host, or with --console."""
    if options.console or is_loopback(options.host):
        return None
    return (
        f"the console is off: serve binds {options.host}, not a loopback address; "
        "restart with --console to serve it there (with --auth it asks for the API key)"
    )


def say_console(url: str, off: str | None) -> None:
    """The banner's console line (docs/console.md)."""
    print(f"# console: {url}/console/" if off is None else f"# {off}", flush=True)


def _log_requests(*, quiet: bool) -> None:
    """One line per request on stderr at INFO (startup.RequestLog), unless ``--quiet``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("localsession.server")
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    log.propagate = False
