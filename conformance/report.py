"""The conformance report: per-test outcomes recorded during a run, written as JSON, and
rendered (one or more reports side by side) as a markdown compatibility table."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from conformance.adapter import Backend

FORMAT = "conformance-report/1"
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
SYMBOLS = {
    "passed": "pass",
    "failed": "**FAIL**",
    "error": "**ERROR**",
    "skipped": "skip",
    "xfailed": "xfail",
    "xpassed": "**XPASS**",
}


def suite_id(item: pytest.Item) -> str:
    """An item's id relative to the suite, as xfail files and snapshots name it:
    ``test_file.py::test_name[param]``."""
    return f"{Path(str(item.path)).name}::{item.nodeid.split('::', 1)[1]}"


def report_id(nodeid: str) -> str:
    """:func:`suite_id` of a test report's node id (``dir/test_file.py::test[param]``)."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


def _reason(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail) or None
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    if report.failed and longrepr is not None:
        text = getattr(longrepr, "reprcrash", None)
        return str(getattr(text, "message", "") or str(longrepr).splitlines()[-1])[:500]
    return None


class Recorder:
    """A pytest plugin object that keeps each test's outcome (registered by the plugin)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(
            report.nodeid, {"id": report.nodeid, "outcome": "passed", "duration_s": 0.0}
        )
        entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if xfail:
                entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            else:
                entry["outcome"] = report.outcome
        elif report.skipped:  # skipped in setup (capability, marker, unavailable backend)
            entry["outcome"] = "xfailed" if xfail else "skipped"
        elif report.failed:  # a fixture failed in setup or teardown
            entry["outcome"] = "error"
        reason = _reason(report)
        if reason and not entry.get("reason"):
            entry["reason"] = reason

    def write(
        self, path: Path, backend: Backend | None, *, spec: str, unavailable: str | None
    ) -> None:
        tests = sorted(self.tests.values(), key=lambda t: t["id"])
        summary = Counter(t["outcome"] for t in tests)
        body = {
            "format": FORMAT,
            "backend": {
                "name": backend.name if backend else spec,
                "version": backend.version if backend else "unavailable",
                "capabilities": sorted(backend.capabilities) if backend else [],
                "limits": asdict(backend.limits) if backend else {},
                "details": backend.details if backend else {},
                "unavailable": unavailable,
            },
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(time.time() - self.started, 1),
            "summary": {k: summary.get(k, 0) for k in OUTCOMES},
            "tests": tests,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2))


def load(path: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text())
    if body.get("format") != FORMAT:
        raise ValueError(f"{path}: not a conformance report (format {body.get('format')!r})")
    return body


def _short(test_id: str) -> str:
    return test_id.split("suite/", 1)[-1]


def render_table(reports: list[dict[str, Any]]) -> str:
    """A markdown compatibility table: a summary per backend, then one row per test."""
    names = [r["backend"]["name"] for r in reports]
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines.append("| version | " + " | ".join(r["backend"]["version"] for r in reports) + " |")
    for outcome in OUTCOMES:
        lines.append(
            f"| {outcome} | " + " | ".join(str(r["summary"][outcome]) for r in reports) + " |"
        )
    lines.append(
        "| capabilities | "
        + " | ".join(str(len(r["backend"]["capabilities"])) for r in reports)
        + " |"
    )
    lines += ["", "| test | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    by_backend = [{_short(t["id"]): t for t in r["tests"]} for r in reports]
    all_ids = sorted({test for tests in by_backend for test in tests})
    for test in all_ids:
        cells = []
        for tests in by_backend:
            entry = tests.get(test)
            cells.append(SYMBOLS[entry["outcome"]] if entry else "-")
        lines.append(f"| `{test}` | " + " | ".join(cells) + " |")
    notes = [
        f"- {r['backend']['name']}: `{_short(t['id'])}` {t['outcome']}: {t['reason']}"
        for r in reports
        for t in r["tests"]
        if t["outcome"] in ("xfailed", "failed", "error", "xpassed") and t.get("reason")
    ]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"
