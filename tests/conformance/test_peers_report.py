"""The peer runs' tooling, without a peer (``make conformance-peers`` installs them; it is not
part of ``make test``): ``report_peers.py`` renders a small sample report into docs/peers.md's
generated blocks, the committed docs/peers.md is what the committed reports render, and the
per-test deadline (``conformance/peers/deadline.py``) stops a hanging test, reports it failed
with where it waited, and lets the run go on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _runs import ROOT, env

from conformance.peers import deadline, report_peers, runkit


def _sample() -> dict[str, Any]:
    prefix = "conformance/suite_tinker/"
    return {
        "format": "conformance-report/1",
        "backend": {
            "name": "tinker",
            "version": "x",
            "capabilities": [],
            "limits": {},
            "details": {},
            "unavailable": None,
        },  # fmt: skip
        "created": "2026-12-05T12:00:00Z",
        "duration_s": 1530.0,
        "summary": {
            "passed": 3,
            "failed": 2,
            "error": 1,
            "skipped": 1,
            "xfailed": 0,
            "xpassed": 0,
        },  # fmt: skip
        "tests": [
            {"id": f"{prefix}test_a.py::test_ok", "outcome": "passed", "duration_s": 1.5},
            {"id": f"{prefix}test_a.py::test_ok2", "outcome": "passed", "duration_s": 0.5},
            {
                "id": f"{prefix}test_a.py::test_hang",
                "outcome": "failed",
                "duration_s": 150.0,
                "reason": "TestTimeout: test timeout: no verdict within 150 s | at x",
            },
            {
                "id": f"{prefix}test_b.py::test_loss[cispo]",
                "outcome": "failed",
                "duration_s": 0.2,
                "reason": "KeyError: 'loss:sum'\nsecond line",
            },
            {
                "id": f"{prefix}test_b.py::test_fixture",
                "outcome": "error",
                "duration_s": 0.1,
                "reason": "x" * 400,
            },
            {
                "id": f"{prefix}test_b.py::test_new",
                "outcome": "skipped",
                "duration_s": 0.0,
                "reason": "needs tinker 0.33.0",
            },
            {
                "id": f"{prefix}test_b.py::test_path",
                "outcome": "passed",
                "duration_s": 0.0,
                "reason": f"{Path.home()}/cache/x",
            },
        ],  # fmt: skip
        "run": {
            "peer": "PeerX",
            "peer_version": "1.2.3",
            "sdk": "tinker 0.16.1",
            "model": "m",
            "attempts": 2,
            "cpus": 2,
            "test_timeout_s": 150,
            "load_1min": {"min": 1.25, "mean": 2.5, "max": 4.0},
        },  # fmt: skip
    }


DOC = """# Peers

Hand-written intro.

<!-- generated: results (conformance/peers/report_peers.py; do not edit) -->
stale table
<!-- end generated: results -->

Prose between.

<!-- generated: verdicts (conformance/peers/report_peers.py; do not edit) -->
<!-- end generated: verdicts -->

## PeerX

Hand-written differences.
"""


def test_sample_report_renders_into_the_results_row_and_verdicts(tmp_path: Path) -> None:
    reports, doc = tmp_path / "reports", tmp_path / "peers.md"
    source = tmp_path / "peerx-0.16.1.json"
    source.write_text(json.dumps(_sample()))
    doc.write_text(DOC)
    assert report_peers.main(["--from", str(source), "--reports", str(reports),
                              "--doc", str(doc), "--write"]) == 0  # fmt: skip
    kept = (reports / "peerx-0.16.1.json").read_text()  # kept beside the others,
    assert str(Path.home()) not in kept and "~/cache/x" in kept  # with no path of this machine
    text = doc.read_text()
    assert "Hand-written intro." in text and "Prose between." in text
    assert "Hand-written differences." in text and "stale table" not in text
    row = next(line for line in text.splitlines() if line.startswith("| `peerx-0.16.1`"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[:9] == ["`peerx-0.16.1`", "PeerX 1.2.3", "tinker 0.16.1", "m",
                         "7", "3", "2", "1", "1"]  # fmt: skip
    assert cells[9] == "25.5 min"  # 1530 s
    assert cells[10] == "1.25 / 2.5 / 4 (2 CPUs)"
    assert cells[11] == "2026-12-05"
    assert "1 hang(s) ended the process; resumed" in cells[12]
    assert "1 stopped at the 150 s test timeout" in cells[12]
    report = {**_sample(), "name": "peerx"}
    report["run"] = {**report["run"], "attempts": 3, "server_exits": 2, "server_exit": "it fell"}
    note = report_peers.render_results([report]).splitlines()[2].split(" | ")[-1]
    assert note == "it fell; 1 stopped at the 150 s test timeout |"  # the resumes: 2 exits
    verdicts = text.split("generated: verdicts")[1]
    assert "**PeerX with tinker 0.16.1** (`peerx-0.16.1`): 4 of 7 tests did not pass" in verdicts
    assert "- `test_b.py::test_loss[cispo]` failed (0.2 s): KeyError: 'loss:sum' second line" in (
        verdicts
    )
    assert "- `test_b.py::test_new` skipped (0 s): needs tinker 0.33.0" in verdicts
    long_line = next(line for line in verdicts.splitlines() if "test_fixture" in line)
    assert long_line.endswith("x...") and long_line.count("x") < 300 + 10
    assert "test_ok`" not in verdicts  # passes are not listed
    # a second write changes nothing, and --check agrees
    args = ["--reports", str(reports), "--doc", str(doc)]
    assert report_peers.main([*args, "--write"]) == 0
    assert doc.read_text() == text
    assert report_peers.main([*args, "--check"]) == 0
    doc.write_text(text.replace("PeerX 1.2.3", "PeerX 9"))
    assert report_peers.main([*args, "--check"]) == 1


def test_an_unavailable_backend_is_one_line_not_a_line_per_test() -> None:
    report = {**_sample(), "name": "peerx-0.38.0"}
    report["backend"] = {**report["backend"], "unavailable": "wire mismatch: refuses 'x'"}
    text = report_peers.render_verdicts([report])
    assert text == (
        "**PeerX with tinker 0.16.1** (`peerx-0.38.0`): none of 7 tests ran: backend "
        "unavailable: wire mismatch: refuses 'x'\n"
    )
    row = report_peers.render_results([report]).splitlines()[2]
    assert "backend unavailable: wire mismatch: refuses 'x'" in row


def test_reasons_lose_colour_codes_and_line_breaks_raw_or_quoted() -> None:
    quoted = "{'detail': 'Server error: \\x1b[36mray::Model.forward()\\x1b[39m\\n  File x'}"
    assert report_peers._short(quoted) == "{'detail': 'Server error: ray::Model.forward() File x'}"
    assert report_peers._short("\x1b[1mbold\x1b[0m\nnext") == "bold next"
    assert report_peers._short("y" * 50, 20) == "y" * 17 + "..."


def test_a_doc_without_the_blocks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no block .*generated: results"):
        report_peers.fill("# no blocks\n", [])


def test_committed_peers_md_is_what_the_committed_reports_render() -> None:
    assert report_peers.main(["--check"]) == 0


HANGING = """
import threading, time

def test_waits_on_a_lock_forever():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()

def test_swallows_exceptions_while_it_waits():
    while True:
        try:
            time.sleep(60)
        except Exception:
            pass

def test_after_them():
    assert True
"""


@pytest.mark.slow  # one pytest process with the conformance plugin, two 1 s timeouts: about 10 s
def test_deadline_stops_a_hanging_test_reports_it_failed_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_hanging.py").write_text(HANGING)
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "--backend=fakes",
            "-p", "conformance.peers.deadline", "--test-timeout=1", "-p", "no:cacheprovider",
            f"--conformance-report={report}", "--rootdir", str(tmp_path), "-q",
            str(tmp_path / "test_hanging.py")]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-3000:]
    tests = {t["id"].split("::")[1]: t for t in json.loads(report.read_text())["tests"]}
    assert tests["test_after_them"]["outcome"] == "passed"
    for name, line in (("test_waits_on_a_lock_forever", 7),
                       ("test_swallows_exceptions_while_it_waits", 12)):  # fmt: skip
        entry = tests[name]
        assert entry["outcome"] == "failed", entry
        assert "no verdict within 1 s (--test-timeout)" in entry["reason"]
        assert f"stopped in its call at test_hanging.py:{line} in {name}" in entry["reason"]
        assert 1.0 <= entry["duration_s"] < 30


def test_deadline_refuses_a_non_positive_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    args = [sys.executable, "-m", "pytest", "-p", "conformance.peers.deadline",
            "--test-timeout=0", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--test-timeout 0.0: give a positive number of seconds" in done.stderr


STUBBORN = """
import time

def test_first():
    assert True

def test_swallows_even_the_deadline():
    while True:
        try:
            time.sleep(60)
        except BaseException:
            pass

def test_never_reached():
    assert True
"""


@pytest.mark.slow  # the watchdog polls every 5 s: about 10 s
def test_a_hang_the_alarm_cannot_stop_ends_the_process_with_its_report(tmp_path: Path) -> None:
    (tmp_path / "test_stubborn.py").write_text(STUBBORN)
    (tmp_path / "conftest.py").write_text(
        "from conformance.peers import deadline\ndeadline.GRACE_S = 1.0\ndeadline.HARD_S = 1.0\n"
    )
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "--backend=fakes",
            "-p", "conformance.peers.deadline", "--test-timeout=1", "-p", "no:cacheprovider",
            f"--conformance-report={report}", "--rootdir", str(tmp_path), "-q",
            str(tmp_path / "test_stubborn.py")]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == deadline.HUNG_EXIT, done.stdout[-3000:] + done.stderr[-3000:]
    body = json.loads(report.read_text())
    tests = {t["id"].split("::")[1]: t for t in body["tests"]}
    assert set(tests) == {"test_first", "test_swallows_even_the_deadline"}  # the third: not run
    assert tests["test_first"]["outcome"] == "passed"
    hung = tests["test_swallows_even_the_deadline"]
    assert hung["outcome"] == "failed"
    assert "could not be stopped: the process was ended 1 s later" in hung["reason"]
    assert "test_stubborn.py:" in hung["reason"]


def test_merge_of_two_partial_reports_sums_the_outcomes() -> None:
    one = {"summary": {"passed": 1, "failed": 1}, "tests": [{"id": "b"}, {"id": "c"}], "x": 1}
    two = {"summary": {"passed": 2, "failed": 0}, "tests": [{"id": "a"}], "x": 2}
    merged = runkit.merge(one, two)
    assert merged["summary"] == {"passed": 3, "failed": 1}
    assert [t["id"] for t in merged["tests"]] == ["a", "b", "c"]
    assert merged["x"] == 1  # the first part's backend and dates
    assert runkit.merge(None, two) is two


SLOW_THEN_MORE = """
import time

def test_done():
    assert True

def test_interrupted():
    time.sleep(60)

def test_not_reached():
    assert True
"""


@pytest.mark.slow  # a pytest process with the conformance plugin: about 8 s
def test_a_test_interrupted_by_sigint_has_no_verdict_in_the_report(tmp_path: Path) -> None:
    """run_peers stops the suite with SIGINT when the peer's server exits, and resumes
    without the reported tests: the interrupted one must not be reported (as passed)."""
    (tmp_path / "test_slow.py").write_text(SLOW_THEN_MORE)
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "--backend=fakes",
            "-p", "conformance.peers.deadline", "--test-timeout=100", "-p", "no:cacheprovider",
            f"--conformance-report={report}", "--rootdir", str(tmp_path), "-q",
            str(tmp_path / "test_slow.py")]  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, env=env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = ""
    while "." not in seen:  # test_done passed: test_interrupted is running
        seen += proc.stdout.read(1)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    ids = [t["id"].split("::")[1] for t in json.loads(report.read_text())["tests"]]
    assert ids == ["test_done"]
