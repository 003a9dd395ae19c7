"""The meta-test: the suite, run against deliberately broken backends, fails exactly where
the planted defect says it must. A suite that cannot fail is worth nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _runs import SUITE, run, suite_command

from conformance.selfcheck import EXPECTED, IDLE_TIMEOUT_S, SLOW


@pytest.mark.parametrize(
    "defect", [pytest.param(d, marks=[pytest.mark.slow] if d in SLOW else []) for d in EXPECTED]
)
def test_suite_catches_planted_defect(defect: str, tmp_path: Path) -> None:
    expected = EXPECTED[defect]
    files = sorted({SUITE / test_id.split("::")[0] for test_id in expected})
    report = tmp_path / f"{defect}.json"
    done = run(
        suite_command(
            f"import:conformance.selfcheck:{defect}",
            f"--conformance-report={report}",
            paths=files,
        )
    )
    assert done.returncode == 1, done.stdout[-3000:]
    tests = json.loads(report.read_text())["tests"]
    failed = {t["id"].split("suite/", 1)[1] for t in tests if t["outcome"] == "failed"}
    assert expected <= failed, (expected - failed, done.stdout[-3000:])


@pytest.mark.slow
def test_the_idle_expiry_test_passes_on_the_unbroken_fakes(tmp_path: Path) -> None:
    """The test the three expiry defects fail passes when nothing is planted: the fakes built
    with the same idle timeout (``--idle-timeout``) that those defects' service declares."""
    report = tmp_path / "idle.json"
    done = run(
        suite_command(
            "fakes",
            f"--idle-timeout={IDLE_TIMEOUT_S:g}",
            f"--conformance-report={report}",
            "-k",
            "test_a_session_idle_past_the_timeout_expires",
            paths=[SUITE / "test_sessions.py"],
        )
    )
    assert done.returncode == 0, done.stdout[-3000:]
    outcomes = [t["outcome"] for t in json.loads(report.read_text())["tests"]]
    assert outcomes == ["passed"], outcomes
