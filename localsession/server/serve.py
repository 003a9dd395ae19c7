"""The foreground server behind ``localsession serve``: configure, print how to connect,
serve until Ctrl-C, then stop every session cleanly."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from localsession.runtime.service import Service, ServiceConfig
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
    long_poll: float = 15.0


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
    }
    if options.home is not None:
        overrides["home"] = options.home.expanduser()
    if options.max_sessions is not None:
        overrides["max_sessions"] = options.max_sessions
    if options.gap_timeout is not None:
        overrides["gap_timeout"] = options.gap_timeout
    return Service(ServiceConfig.from_env(**overrides))


def serve(options: ServeOptions) -> int:
    service = build_service(options)
    sock = bind(options.host, options.port)
    url = url_of(sock)
    print(f"localsession serving on {url} (home {service.config.home}); Ctrl-C stops it")
    print("# point the SageMaker SDK, boto3 or the AWS CLI here:")
    for key, value in client_env(url, service.config.region).items():
        print(f"export {key}={value}")
    server = make_server(service, long_poll=options.long_poll)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then re-raised the Ctrl-C it captured
    finally:
        service.close()
        sock.close()
        print("localsession server stopped")
    return 0
