"""Declaring a server's limits, and what a snapshot check reports.

- ``test_session_quota`` checks a declared ``--max-sessions`` (and fails when the number is
  not the backend's real cap); with none declared it skips, naming the option.
- The parity report of ``--snapshot-check`` lists every recorded test: agree or differ for
  the tests that ran, ``not run`` with the reason (a skip's reason, deselection, not
  collected) for the rest.
- Every option of the plugin is in ``localsession conformance --help``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _runs import REFERENCE, ROOT, SUITE, run, suite_command

from conformance import plugin
from conformance.backends.fakes import MAX_SESSIONS
from localsession.cli import main

QUOTA = "test_sessions.py::test_session_quota"


def _run(*args: str, paths: list[Path]) -> tuple[int, str]:
    """The suite against ``limitless.py`` (tests/conformance on the path)."""
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "conformance"), str(ROOT)])}
    done = run(suite_command("import:limitless:make", *args, paths=paths), env)
    return done.returncode, done.stdout + done.stderr


def _outcomes(report: Path) -> dict[str, dict[str, Any]]:
    tests = json.loads(report.read_text())["tests"]
    return {t["id"].split("/")[-1]: t for t in tests}


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_session_quota_checks_a_declared_limit_and_skips_without_one(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    sessions = [SUITE / "test_sessions.py"]
    code, out = _run("-k", "quota", f"--conformance-report={report}", paths=sessions)
    assert code == 0, out
    skipped = _outcomes(report)[QUOTA]
    assert skipped["outcome"] == "skipped"
    assert "declares no max sessions: pass --max-sessions" in skipped["reason"]

    code, out = _run("-k", "quota", f"--max-sessions={MAX_SESSIONS}", paths=sessions)
    assert code == 0, out
    assert "1 passed" in out
    # One more than the real cap: the extra session is accepted where a refusal was due.
    code, out = _run("-k", "quota", f"--max-sessions={MAX_SESSIONS + 1}", paths=sessions)
    assert code == 1 and "1 failed" in out, out
    code, out = _run("-k", "quota", "--max-sessions=0", paths=sessions)
    assert code == 4 and "--max-sessions 0: give a positive number" in out, out


def test_the_parity_report_lists_every_recorded_test(tmp_path: Path) -> None:
    report = tmp_path / "parity.json"
    code, out = _run(
        f"--snapshot-check={REFERENCE}",
        f"--snapshot-report={report}",
        "--drop-capability=session.quota",
        "-k",
        "not test_list_sessions_filters",
        paths=[SUITE / "test_sessions.py"],
    )
    recorded = json.loads((REFERENCE / "validation.json").read_text())["tests"]
    parity = json.loads(report.read_text())
    tests = parity["tests"]
    assert parity["recorded"] == recorded == len(tests) >= 100, out
    assert tests[QUOTA]["status"] == "not run"
    assert tests[QUOTA]["reason"].startswith(
        "skipped: backend limitless does not declare capability 'session.quota'"
    )
    listing = tests["test_sessions.py::test_list_sessions_filters"]
    assert listing == {"status": "not run", "reason": "deselected (-k, -m or --deselect)"}
    ran = {t: v for t, v in tests.items() if t.startswith("test_sessions.py::")}
    assert {v["status"] for t, v in ran.items() if v["status"] != "not run"} <= {"agree", "differ"}
    not_run = {t for t, v in ran.items() if v["status"] == "not run"}
    assert not_run == {QUOTA, "test_sessions.py::test_list_sessions_filters"}
    others = [v for t, v in tests.items() if not t.startswith("test_sessions.py::")]
    assert others and all(v["status"] == "not run" for v in others)
    assert all(v["reason"].startswith("not collected") for v in others)
    assert f"{recorded} recorded tests" in out  # the terminal summary counts them too


def test_every_plugin_option_is_in_the_conformance_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names: list[str] = []

    class Group:  # what pytest_addoption calls, collecting the option names
        def addoption(self, *flags: str, **settings: Any) -> None:
            names.extend(flags)

        def getgroup(self, *args: Any) -> Any:
            return self

    plugin.pytest_addoption(Group())  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        main(["conformance", "--help"])
    shown = capsys.readouterr().out
    spelled = {"--conformance-report": "--report"}  # the command's own name for it
    missing = [name for name in names if spelled.get(name, name) not in shown]
    assert names and missing == []
