"""The pytest side of snapshot conformance (``--snapshot-update`` / ``--snapshot-check``):
when to capture, where snapshots live, and the parity report. See snapshots.py."""

from __future__ import annotations

import importlib.metadata
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.report import report_id, suite_id
from conformance.snapshots import SUFFIX, VALIDATION, Capture, compare_events
from localsession.parity.compare import DEFAULT_TOLERANCES


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_snapshots(directory: Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(validation.json, {test id: events}) of a snapshot folder."""
    validation = directory / VALIDATION
    if not validation.is_file():
        raise pytest.UsageError(
            f"--snapshot-check {directory}: no {VALIDATION} there; record snapshots first "
            "with `localsession conformance --backend=... --snapshot-update DIR`"
        )
    meta = json.loads(validation.read_text())
    tests: dict[str, list[Any]] = {}
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        for test_id, entry in json.loads(path.read_text()).items():
            tests[test_id] = entry["events"]
    return meta, tests


class SnapshotPlugin:
    """Registered by conformance.plugin when a snapshot option is given."""

    def __init__(self, update: Path | None, check: Path | None, report: Path | None) -> None:
        self.update, self.check, self.report = update, check, report
        self.capture = Capture()
        self.captured: dict[str, list[Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.backend: dict[str, str] = {}
        self.meta: dict[str, Any] = {}
        self.recorded: dict[str, list[Any]] = {}
        if check is not None:
            self.meta, self.recorded = load_snapshots(check)
        self.tolerances = self.meta.get("tolerances") or DEFAULT_TOLERANCES
        #: Why a test did not run to the end: {test id: reason} (skips, setup errors,
        #: deselection); a recorded test in none of these was not collected at all.
        self.not_run: dict[str, str] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        backend = getattr(item, "funcargs", {}).get("backend")
        if backend is None:
            yield
            return
        if not self.backend:
            self.backend = {"backend": backend.name, "backend_version": backend.version}
            self.capture.watch_module(backend.ts)
        for value in item.funcargs.values():  # type: ignore[attr-defined]  # fixtures
            self.capture.watch(value)
        self.capture.start()
        try:
            yield
        finally:
            events = self.capture.stop()
        test_id = suite_id(item)
        if self.update is not None:
            self.captured[test_id] = events
        if self.check is not None:
            self.results[test_id] = self._verdict(test_id, events)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note the tests that did not run to the end, and why."""
        if hasattr(report, "wasxfail"):
            return
        test_id = report_id(report.nodeid)
        if report.skipped:  # a skipped test records nothing (its events, if any, are partial)
            self.captured.pop(test_id, None)
        if self.check is None:
            return
        if report.when == "call" and test_id in self.results:
            self.results[test_id]["outcome"] = report.outcome
        if report.skipped and report.when in ("setup", "call"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
            self.not_run[test_id] = "skipped: " + str(reason).removeprefix("Skipped: ")
            self.results.pop(test_id, None)  # a skip inside the test: its events are partial
        elif report.failed and report.when == "setup":
            crash = getattr(report.longrepr, "reprcrash", None)
            message = getattr(crash, "message", None) or str(report.longrepr).splitlines()[-1]
            self.not_run[test_id] = f"setup failed: {message}"[:300]

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.not_run[suite_id(item)] = "deselected (-k, -m or --deselect)"

    def _verdict(self, test_id: str, events: list[Any]) -> dict[str, Any]:
        if test_id not in self.recorded:
            return {"status": "not recorded"}
        recorded = self.recorded[test_id]
        if test_id in (self.meta.get("volatile_tests") or {}):  # timing decides the values
            recorded = [{"call": e["call"]} for e in recorded]
            events = [{"call": e["call"]} for e in events]
        lines = compare_events(recorded, events, self.tolerances)
        return {"status": "differ", "diff": lines} if lines else {"status": "agree"}

    # -- the end ---------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.capture.restore()
        if self.update is not None:
            self._write(self.update)
        if self.check is not None:
            if self.report is not None:
                self.report.write_text(json.dumps(self.parity_report(), indent=1) + "\n")
            if any(r["status"] == "differ" for r in self.results.values()):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def parity_report(self) -> dict[str, Any]:
        """Every recorded test, and every test run: ``agree``, ``differ`` (with the diff),
        ``not run`` (with the reason) or ``not recorded``."""
        tests = dict(self.results)
        for test_id in self.recorded:
            if test_id not in tests:
                reason = self.not_run.get(test_id, "not collected: its file or test was not "
                                          "selected, or no longer exists in the suite")  # fmt: skip
                tests[test_id] = {"status": "not run", "reason": reason}
        return {
            "snapshots": {k: self.meta.get(k) for k in ("backend", "backend_version", "date")},
            "checked": self.backend,
            "recorded": len(self.recorded),
            "tests": dict(sorted(tests.items())),
        }

    def _write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        by_file: dict[str, dict[str, Any]] = {}
        for test_id, events in self.captured.items():
            by_file.setdefault(test_id.split("::", 1)[0], {})[test_id] = {"events": events}
        for name, entries in by_file.items():
            path = directory / (Path(name).stem + SUFFIX)
            old = json.loads(path.read_text()) if path.is_file() else {}
            merged = {**old, **entries}
            path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        validation = directory / VALIDATION
        old_meta = json.loads(validation.read_text()) if validation.is_file() else {}
        meta = {
            **self.backend,
            "sdk": f"sagemaker-train {_version('sagemaker-train')}",
            "localsession": _version("localsession"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tolerances": old_meta.get("tolerances") or DEFAULT_TOLERANCES,
            "volatile_tests": old_meta.get("volatile_tests") or {},
        }
        meta["tests"] = sum(len(json.loads(p.read_text())) for p in directory.glob(f"*{SUFFIX}"))
        validation.write_text(json.dumps(meta, indent=1) + "\n")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        if self.update is not None:
            write(f"snapshots of {len(self.captured)} tests written to {self.update}")
        if self.check is None:
            return
        tests = self.parity_report()["tests"]
        counts: dict[str, int] = {}
        for result in tests.values():
            counts[result["status"]] = counts.get(result["status"], 0) + 1
        terminalreporter.section("parity report")
        write(
            f"against {self.check} ({self.meta.get('backend')}, {self.meta.get('date')}): "
            f"{len(self.recorded)} recorded tests, "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        )
        uncollected = [t for t, r in tests.items() if r.get("reason", "").startswith("not coll")]
        if uncollected:  # one line for them all: a run of one file would list a hundred
            write(f"not run: {len(uncollected)} recorded tests not collected (not selected)")
        for test_id, result in tests.items():
            if test_id in uncollected:
                continue
            if result["status"] != "agree":
                reason = f" ({result['reason']})" if result.get("reason") else ""
                write(f"{result['status']}: {test_id}{reason}", red=result["status"] == "differ")
                for line in result.get("diff", [])[:20]:
                    write(f"    {line}")
