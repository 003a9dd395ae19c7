"""``localsession conformance`` and ``localsession conformance-table``: run the suite against
a backend, and render reports as a markdown compatibility table. The options are declared in
``localsession/cli.py``, which imports this module only when one of these commands runs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

SUITE = Path(__file__).parent / "suite"
TINKER_SUITE = Path(__file__).parent / "suite_tinker"


def run_suite(backend: str, report: Path | None, slow: bool, extra: Sequence[str]) -> int:
    import pytest

    args = ["-p", "conformance.plugin", f"--backend={backend}", str(SUITE)]
    if backend.partition("=")[0] == "tinker":  # suite/ is then skipped, test by test, as
        args.append(str(TINKER_SUITE))  # SageMaker-only; the Tinker surface runs instead
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
