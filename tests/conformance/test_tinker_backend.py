"""``--backend=tinker`` aimed at servers and SDKs other than its own: a wire mismatch stops
the run with one message naming the SDK release and the refused field; the SDK-release
layer (backends/tinker_compat.py) reads refusals and features; the suite's Tinker options
reach the backend; and collecting the SageMaker suite needs no hypothesis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _runs import ROOT, env, run, suite_command

pytest.importorskip("tinker")

from conformance.backends import tinker_compat as compat  # noqa: E402
from conformance.selfcheck_tinker import WIRE_REFUSAL  # noqa: E402

TINKER_SUITE = ROOT / "conformance" / "suite_tinker"
BLOCK_HYPOTHESIS = """
import sys


class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None


sys.meta_path.insert(0, _Blocked())
"""


class _Refusal(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"Error code: {status} - {body}")
        self.status_code = status
        self.body = body


def test_a_pydantic_extra_field_refusal_names_the_field() -> None:
    assert compat.wire_refusal(_Refusal(422, WIRE_REFUSAL)) == "optimizer_config"


def test_a_refused_value_is_not_a_wire_mismatch() -> None:
    value = {"detail": [{"type": "greater_than", "loc": ["body", "rank"], "msg": "> 0"}]}
    assert compat.wire_refusal(_Refusal(422, value)) is None
    assert compat.wire_refusal(_Refusal(400, {"detail": "rank must be positive"})) is None
    assert compat.wire_refusal(_Refusal(500, WIRE_REFUSAL)) is None  # a fault, not a refusal
    text = {"detail": "unknown field 'optimizer_config' in create_model"}
    assert compat.wire_refusal(_Refusal(400, text)) == "optimizer_config"


def test_features_follow_the_installed_sdk() -> None:
    import tinker

    assert compat.supports(tinker, "loss:cross_entropy")
    assert not compat.supports(tinker, "loss:no_such_loss")
    assert compat.supports(tinker, "param:SamplingClient.sample.topk_prompt_logprobs")
    assert not compat.supports(tinker, "sample:no_such_keyword")
    assert compat.supports(tinker, "rest:list_checkpoints")
    with pytest.raises(ValueError, match="unknown SDK feature kind"):
        compat.supports(tinker, "bogus:thing")


def test_each_feature_gate_names_a_release_the_installed_sdk_is_not_older_than() -> None:
    import tinker

    installed = compat.version_tuple(compat.sdk_version())
    for feature, added in compat.ADDED_IN.items():
        assert compat.supports(tinker, feature), feature
        assert compat.version_tuple(added) <= installed, (feature, added)
    reason = compat.missing_reason("0.16.1", ["sample:topk_sample_logprobs", "loss:x"])
    assert reason == (
        "tinker 0.16.1 cannot send sample:topk_sample_logprobs (added in tinker 0.29.0), loss:x"
    )


def test_a_wire_mismatch_is_one_failure_naming_version_and_field(tmp_path: Path) -> None:
    report = tmp_path / "mismatch.json"
    done = run(
        suite_command(
            "import:conformance.selfcheck_tinker:wire_mismatch",
            f"--conformance-report={report}",
            paths=[TINKER_SUITE],
        )
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if "wire mismatch" in line]
    assert len(lines) == 1, lines
    assert f"tinker {compat.sdk_version()}" in lines[0] and "'optimizer_config'" in lines[0]
    assert lines[0].startswith("FAILED: backend unavailable")
    assert " failed" not in output.splitlines()[-1], output.splitlines()[-1]


def test_collecting_the_sagemaker_suite_needs_no_hypothesis(tmp_path: Path) -> None:
    blocker = tmp_path / "sitecustomize.py"  # hypothesis cannot be imported in the child
    blocker.write_text(BLOCK_HYPOTHESIS)
    child_env = {**env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
            "-p", "no:hypothesispytest", "-p", "conformance.plugin", "--backend=fakes",
            str(ROOT / "conformance" / "suite" / "test_stateful.py")]  # fmt: skip
    done = subprocess.run(
        args, cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "test_stateful_small" in done.stdout


def test_an_old_sdks_failed_retrieve_carries_its_status() -> None:
    old = ValueError("Error retrieving result: Error code: 422 - {'detail': 'Future failed'}")
    assert compat.status_of(old) == 422
    assert compat.status_of(ValueError("rank must be positive")) is None


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_the_expiry_test_skips_naming_the_option_when_no_timeout_is_declared(
    tmp_path: Path,
) -> None:
    report = tmp_path / "expiry.json"
    test = "test_tinker_sessions.py::test_a_session_whose_heartbeats_stop_expires"
    done = run(suite_command("tinker", f"--conformance-report={report}", "-rs",
                             paths=[TINKER_SUITE / test]))  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (outcome,) = json.loads(report.read_text())["tests"]
    assert outcome["outcome"] == "skipped"
    assert "declares no heartbeat timeout: pass --heartbeat-timeout" in outcome["reason"]
