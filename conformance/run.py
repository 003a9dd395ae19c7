"""``localsession conformance`` and ``localsession conformance-table``: run the suite against
a backend, and render reports as a markdown compatibility table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

SUITE = Path(__file__).parent / "suite"


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser(
        "conformance",
        help="run the conformance suite against a backend (extra arguments go to pytest)",
    )
    run.add_argument(
        "--backend", default="inprocess", help="inprocess | http | http=URL | fakes | remote"
    )
    run.add_argument("--report", type=Path, help="write the JSON report here")
    run.add_argument("--slow", action="store_true", help="also run the slow tests")
    table = commands.add_parser(
        "conformance-table", help="render conformance reports as a markdown table"
    )
    table.add_argument("reports", nargs="+", type=Path)
    table.add_argument("-o", "--output", type=Path, help="write here instead of stdout")


def run_suite(backend: str, report: Path | None, slow: bool, extra: Sequence[str]) -> int:
    import pytest

    args = ["-p", "conformance.plugin", f"--backend={backend}", str(SUITE)]
    if report is not None:
        args.append(f"--conformance-report={report}")
    args += ["-m", "" if slow else "not slow", *extra]
    return int(pytest.main(args))


def render(reports: Sequence[Path], output: Path | None) -> int:
    from conformance.report import load, render_table

    text = render_table([load(path) for path in reports])
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
    return 0
