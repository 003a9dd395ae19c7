"""The meta-test: the suite, run against deliberately broken backends, fails exactly where
the planted defect says it must. A suite that cannot fail is worth nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _runs import SUITE, run, suite_command

from conformance.selfcheck import EXPECTED, SLOW


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
