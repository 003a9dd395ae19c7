"""The ``localsession serve`` command's options (its parser; the CLI, cli.py, dispatches
it to server/serve.py). Standard library and ``vocab`` only, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localsession import vocab


def _seconds(text: str) -> float:
    """An option's value as seconds >= 0 (argparse names the option when this raises)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0, e.g. 600")
    return value


def add_serve(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``serve`` subcommand and its options."""
    serve = commands.add_parser(
        "serve",
        help="serve the training-session API over HTTP for the unmodified SDK",
        description="Serve the SageMaker training-session API (control plane, runtime, Hub, "
        "model registry) and OpenAI chat completions over HTTP, in the foreground, until "
        "Ctrl-C or SIGTERM. Prints the environment variables that point the SDK, boto3 or the "
        "AWS CLI here, then logs one line per request. One server per home: a second server on the "
        "same home refuses to start.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    serve.add_argument(
        "--port", type=int, default=8080, help="port (default 8080); 0 picks a free one"
    )
    serve.add_argument(
        "--home",
        type=Path,
        help="state directory (default $LOCALSESSION_HOME, else ~/.localsession)",
    )
    serve.add_argument(
        "--relaxed", action="store_true", help="lift the service limits (e.g. max_tokens >= 512)"
    )
    serve.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="serve base model NAME (a service model id) with TARGET: a built-in, a model "
        "directory, or a model in the local Hugging Face cache (repeatable); "
        "NAME=TARGET;max_context=N also sets the context length its sessions accept",
    )
    serve.add_argument("--max-sessions", type=int, help="concurrent session cap (default 4)")
    serve.add_argument(
        "--gap-timeout",
        type=_seconds,
        help="seconds a missing sequence number blocks later ops (default 60)",
    )
    serve.add_argument(
        "--idle-timeout",
        type=_seconds,
        help="seconds a session may sit with no operation before it becomes Expired "
        "(default: never, or $LOCALSESSION_IDLE_TIMEOUT)",
    )
    serve.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        help="seconds without a heartbeat before a tinker session is expired and its models' "
        f"sessions stopped (default {vocab.TINKER_HEARTBEAT_TIMEOUT_S:g}, as the SDK warns; "
        "0 never)",
    )
    serve.add_argument(
        "--lenient-sequence",
        action="store_true",
        help="count a refused op's sequence number as used instead of waiting on it",
    )
    serve.add_argument(
        "--long-poll",
        type=float,
        default=1.0,
        help="seconds the server may hold a result poll of a running op (default 1: an "
        "SDK result(timeout=t) then returns within t + 3 s)",
    )
    serve.add_argument(
        "--submit-hold",
        type=float,
        default=3.0,
        help="seconds the server may hold an Execute*Operation answer until its op finishes, "
        "so the SDK's first poll finds it done (default and most 3: the SDK's stop() waits "
        "5 s for submits in flight; 0 answers at once)",
    )
    serve.add_argument(
        "--max-queued-ops",
        type=int,
        help="training ops a session may hold queued before submits are throttled (default 1024)",
    )
    serve.add_argument(
        "--auth",
        metavar="ACCESS_KEY:SECRET",
        help="require AWS SigV4 requests signed with these credentials",
    )
    serve.add_argument("--quiet", action="store_true", help="no per-request log lines")
    serve.add_argument(
        "--console",
        action="store_true",
        help="serve the console (/console) on a non-loopback --host too (docs/console.md)",
    )
    serve.add_argument(
        "--replay",
        type=Path,
        metavar="DIR",
        help="answer from a cassette of `localsession record` (a file, or the newest in DIR) "
        "instead of running sessions: fully offline (docs/parity.md)",
    )
