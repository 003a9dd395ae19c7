"""Snapshot conformance (``--snapshot-update`` / ``--snapshot-check``).

- The shipped reference set (conformance/reference/, localsession recorded in-process) is
  matched by all three carriers: in-process, HTTP (``serve`` + the SDK) and ``mock()``. The
  HTTP carrier is the http run the folder's other tests share (conftest ``suite_runs``, with
  ``--snapshot-check``); the other two are two more full runs, at the same time as each
  other, in the slow tier.
- Three divergences planted in a backend (planted.py) are reported as diffs for exactly the
  tests whose recorded events they touch, found from the recording itself; every other
  test agrees.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _runs import REFERENCE, ROOT, SNAPSHOT_BACKEND, TIMEOUT, Finished, env, run, suite_command
from procio import spawn

pytestmark = pytest.mark.integration
CARRIERS = {  # besides the http carrier, checked by the shared suite_runs
    "inprocess": "import:conformance.backends.carriers:make_inprocess_wire",
    "mock": "import:conformance.backends.carriers:make_mock",
}


def _report(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _recorded() -> int:
    """How many tests the shipped reference set recorded."""
    return sum(len(json.loads(p.read_text())) for p in REFERENCE.glob("*.snapshot.json"))


def _assert_all_agree(name: str, returncode: int, output: str, report: Path) -> None:
    """A carrier's run passed and its parity report lists every recorded test as agreeing."""
    assert returncode == 0, f"{name}:\n{output[-6000:]}"
    verdicts = {t: v["status"] for t, v in _report(report)["tests"].items()}
    assert set(verdicts.values()) == {"agree"}, (name, verdicts)
    assert len(verdicts) == _recorded() >= 100, name


def test_the_http_carrier_matches_the_reference_snapshots(
    suite_runs: dict[str, Finished],
) -> None:
    shared = suite_runs[SNAPSHOT_BACKEND]
    assert shared.snapshots is not None
    _assert_all_agree(SNAPSHOT_BACKEND, shared.returncode, shared.output, shared.snapshots)


@pytest.mark.slow
def test_the_inprocess_and_mock_carriers_match_the_reference_snapshots(tmp_path: Path) -> None:
    """Two more full suite runs (the default tier checks the http carrier's, which it shares
    with the folder's other tests)."""
    with contextlib.ExitStack() as stack:  # each run a process group, stopped on the way out
        procs = {}
        for name, backend in CARRIERS.items():
            report = tmp_path / f"{name}.json"
            args = suite_command(
                backend, f"--snapshot-check={REFERENCE}", f"--snapshot-report={report}"
            )
            log = stack.enter_context((tmp_path / f"{name}.log").open("w+"))  # never a full pipe
            proc = stack.enter_context(
                spawn(args, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, text=True)
            )
            procs[name] = (proc, report, log)
        for name, (proc, report, log) in procs.items():
            proc.wait(timeout=TIMEOUT)
            log.seek(0)
            _assert_all_agree(name, proc.returncode, log.read(), report)


def _touched(events: list[dict[str, Any]]) -> set[str]:
    """Which planted divergences a recorded test's events meet (planted.py)."""
    hits = set()
    for event in events:
        error = event.get("error") or {}
        if error.get("code") == "ResourceNotFound":
            hits.add("code")
        value = event.get("value")
        if event["call"] == "result:compute_logprobs" and any(
            isinstance(v, float) for v in value or []
        ):
            hits.add("float")
        if event["call"] == "result:optim_step" and "grad_norm" in (value or {}).get("metrics", {}):
            hits.add("field")
    return hits


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_planted_divergences_are_reported_for_exactly_the_affected_tests(tmp_path: Path) -> None:
    snapshots, report = tmp_path / "snapshots", tmp_path / "parity.json"
    snapshots.mkdir()  # the timing-dependent tests the reference set declares, as a user would
    volatile = json.loads((REFERENCE / "validation.json").read_text())["volatile_tests"]
    (snapshots / "validation.json").write_text(json.dumps({"volatile_tests": volatile}))
    recorded = run(suite_command("fakes", f"--snapshot-update={snapshots}"))
    assert recorded.returncode == 0, recorded.stdout[-4000:]
    validation = json.loads((snapshots / "validation.json").read_text())
    assert validation["backend"] == "fakes" and validation["sdk"].startswith("sagemaker-train")
    assert validation["date"] and validation["tests"] >= 100

    events: dict[str, list[dict[str, Any]]] = {}
    for path in snapshots.glob("*.snapshot.json"):
        events.update({k: v["events"] for k, v in json.loads(path.read_text()).items()})
    expected = {test: hits for test, e in events.items() if (hits := _touched(e))}
    assert {h for hits in expected.values() for h in hits} == {"code", "float", "field"}

    planted_env = {
        **env(),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "conformance"), str(ROOT)]),
    }
    args = suite_command(
        "import:planted:make_planted",
        f"--snapshot-check={snapshots}",
        f"--snapshot-report={report}",
    )
    checked = run(args, planted_env)
    assert checked.returncode != 0  # a divergence fails the run
    assert "parity report" in checked.stdout
    tests = _report(report)["tests"]
    differ = {t for t, v in tests.items() if v["status"] == "differ"}
    assert differ == set(expected), (sorted(differ - set(expected)), sorted(set(expected) - differ))
    assert {v["status"] for t, v in tests.items() if t not in differ} == {"agree"}
    for test, hits in expected.items():
        diff = "\n".join(tests[test]["diff"])
        if "code" in hits:
            assert "'ResourceNotFoundException', recorded 'ResourceNotFound'" in diff, diff
        if "field" in hits:
            assert "metrics.grad_norm: missing" in diff, diff
        if "float" in hits:
            assert "|diff| 0.01" in diff, diff
