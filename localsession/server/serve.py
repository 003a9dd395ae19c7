"""The foreground server behind ``localsession serve``: configure, print how to connect,
serve until Ctrl-C, then stop every session cleanly."""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from localsession.runtime.service import Service, ServiceConfig
from localsession.server.auth import Credential
from localsession.server.runner import bind, client_env, make_server, url_of


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    home: Path | None = None
    relaxed: bool = False
    model_map: list[str] = field(default_factory=list)
    max_sessions: int | None = None
    gap_timeout: float | None = None
    lenient_sequence: bool = False
    long_poll: float = 0.9
    max_queued_ops: int | None = None
    #: ``ACCESS_KEY:SECRET``: require SigV4 requests signed with it (server/auth.py).
    auth: str | None = None


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str, authenticated: bool) -> None:
    """Say loudly, on stderr, that a non-loopback bind lets other machines in."""
    if is_loopback(host):
        return
    bar = "!" * 78
    print(
        f"{bar}\nWARNING: localsession is binding {host}, which is NOT a loopback address.\n"
        "Anyone who can reach this machine on that port can create sessions, run code paths\n"
        "that read and write under its home directory, and read or delete its model packages.\n"
        + (
            "SigV4 authentication (--auth) is on; requests are still sent unencrypted (HTTP).\n"
            if authenticated
            else "No authentication is on: add --auth ACCESS_KEY:SECRET, or bind 127.0.0.1.\n"
        )
        + bar,
        file=sys.stderr,
        flush=True,
    )


def build_service(options: ServeOptions) -> Service:
    """The service a server runs, from the command line over ``LOCALSESSION_*`` defaults."""
    if options.model_map:
        for entry in options.model_map:
            if "=" not in entry:
                raise SystemExit(f"--model-map {entry!r}: expected NAME=TARGET")
        current = os.environ.get("LOCALSESSION_MODEL_MAP", "")
        os.environ["LOCALSESSION_MODEL_MAP"] = ",".join(filter(None, [current, *options.model_map]))
    overrides: dict[str, object] = {
        "strict": not options.relaxed,
        "lenient_sequence": options.lenient_sequence,
        # A server outlives its sessions' engines: keep their records (runtime/persist.py),
        # and never let a remote caller name a path on this machine as a base model.
        "persist_sessions": True,
        "local_model_paths": False,
    }
    if options.max_queued_ops is not None:
        overrides["max_queued_ops"] = options.max_queued_ops
    if options.home is not None:
        overrides["home"] = options.home.expanduser()
    if options.max_sessions is not None:
        overrides["max_sessions"] = options.max_sessions
    if options.gap_timeout is not None:
        overrides["gap_timeout"] = options.gap_timeout
    return Service(ServiceConfig.from_env(**overrides))


def serve(options: ServeOptions) -> int:
    try:
        credential = Credential.parse(options.auth) if options.auth else None
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    warn_if_exposed(options.host, credential is not None)
    service = build_service(options)
    sock = bind(options.host, options.port)
    url = url_of(sock)
    print(f"localsession serving on {url} (home {service.config.home}); Ctrl-C stops it")
    print("# point the SageMaker SDK, boto3 or the AWS CLI here:")
    env = client_env(url, service.config.region)
    if credential is not None:  # the secret is the user's own; it is not echoed
        env["AWS_ACCESS_KEY_ID"] = credential.access_key
        env["AWS_SECRET_ACCESS_KEY"] = "<the SECRET given to --auth>"
    for key, value in env.items():
        print(f"export {key}={value}")
    server = make_server(service, long_poll=options.long_poll, credential=credential)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then re-raised the Ctrl-C it captured
    finally:
        service.close()
        sock.close()
        print("localsession server stopped")
    return 0
