"""The conformance suite passes on inprocess, http (the real SDK over HTTP) and fakes, and
its report is produced and rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _runs import BACKENDS, Finished

from conformance.backends.common import xfail_file
from conformance.capabilities import CAPABILITIES
from conformance.plugin import read_xfail_file
from localsession.cli import main


@pytest.mark.parametrize("backend", BACKENDS)
def test_suite_passes(suite_runs: dict[str, Finished], backend: str) -> None:
    run = suite_runs[backend]
    assert run.returncode == 0, run.output[-5000:]
    report = json.loads(run.report.read_text())
    summary = report["summary"]
    assert summary["failed"] == summary["error"] == summary["xpassed"] == 0, summary
    assert summary["passed"] >= 90, summary
    known = xfail_file(backend)
    assert summary["xfailed"] == (len(read_xfail_file(known)) if known else 0)
    assert report["backend"]["name"] == backend
    assert report["backend"]["capabilities"] == sorted(CAPABILITIES)


def test_report_records_every_test(suite_runs: dict[str, Finished]) -> None:
    report = json.loads(suite_runs["fakes"].report.read_text())
    assert report["format"] == "conformance-report/1"
    assert report["backend"]["version"]
    ids = [t["id"] for t in report["tests"]]
    assert len(ids) == len(set(ids)) >= 100
    assert {t["outcome"] for t in report["tests"]} <= {"passed", "skipped", "xfailed"}
    slow = [t for t in report["tests"] if t["id"].endswith("test_stateful_large")]
    assert slow == []  # deselected by the default `-m 'not slow'`: not in the report


def test_table_renders_all_reports(
    suite_runs: dict[str, Finished], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "table.md"
    reports = [str(suite_runs[b].report) for b in BACKENDS]
    assert main(["conformance-table", *reports, "-o", str(out)]) == 0
    table = out.read_text()
    assert table.splitlines()[0] == "| | inprocess | http | fakes |"
    rows = [line for line in table.splitlines() if line.startswith("| `test_")]
    assert len(rows) == len(json.loads(suite_runs["fakes"].report.read_text())["tests"])
    stop_row = next(r for r in rows if "test_stop_token_is_returned" in r)
    assert stop_row.split("|")[2:5] == [" pass ", " pass ", " pass "]
    assert main(["conformance-table", reports[0]]) == 0
    assert capsys.readouterr().out.startswith("| | inprocess |")
