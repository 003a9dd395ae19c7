"""``localsession trace SESSION -o FILE``: download a session's Chrome trace from a running
``serve`` (docs/console.md).

SESSION is a runtime session's name (a SageMaker training session, or a Tinker training
run's ``tinker-...`` session as the console lists it), a Tinker session id (its training
runs and samplers together), or ``all``. The server is ``--url`` (default: the
``TINKER_BASE_URL`` a shell pointed at ``serve`` exports, else http://127.0.0.1:8080), and
under ``serve --auth`` the key is ``--api-key`` or ``TINKER_API_KEY``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


def add_trace(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    trace = commands.add_parser(
        "trace",
        help="download a session's trace (Chrome trace JSON) from a running serve",
        description="Write SESSION's ops as Chrome trace-event JSON (open it in "
        "ui.perfetto.dev or chrome://tracing). SESSION: a session name, a Tinker session id, "
        "or `all`.",
    )
    trace.add_argument(
        "session", metavar="SESSION", help="a session name, a Tinker session id, or all"
    )
    trace.add_argument("-o", "--output", type=Path, help="file (default SESSION.trace.json)")
    trace.add_argument(
        "--url", help=f"the serve URL (default $TINKER_BASE_URL, else {DEFAULT_URL})"
    )
    trace.add_argument("--api-key", help="under serve --auth (default $TINKER_API_KEY)")


def _get(url: str, key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def run_trace(args: argparse.Namespace) -> int:
    base = (args.url or os.environ.get("TINKER_BASE_URL") or DEFAULT_URL).rstrip("/")
    key = args.api_key or os.environ.get("TINKER_API_KEY")
    name = urllib.parse.quote(args.session, safe="")
    api = f"{base}/console/api"
    if args.session == "all":
        candidates = [f"{api}/trace.json"]
    else:
        candidates = [f"{api}/sessions/{name}/trace.json", f"{api}/tinker/{name}/trace.json"]
    failure = ""
    for url in candidates:
        try:
            status, body = _get(url, key)
        except (urllib.error.URLError, OSError) as exc:
            print(
                f"localsession trace: error: cannot reach {base} ({exc}); start "
                "`localsession serve` or pass --url",
                file=sys.stderr,
            )
            return 2
        if status == 200:
            output = args.output or Path(f"{args.session}.trace.json")
            output.write_bytes(body)
            spans = sum(1 for e in json.loads(body)["traceEvents"] if e.get("ph") == "X")
            print(f"wrote {output} ({len(body)} bytes, {spans} spans); open it in ui.perfetto.dev")
            return 0
        if status == 403:
            print(
                "localsession trace: error: the server wants the API key (serve --auth): "
                "pass --api-key or set TINKER_API_KEY",
                file=sys.stderr,
            )
            return 2
        failure = body.decode("utf-8", "replace").strip()
    print(
        f"localsession trace: error: {args.session!r} is no session or Tinker session on "
        f"{base} ({failure}); see {base}/console/",
        file=sys.stderr,
    )
    return 2
