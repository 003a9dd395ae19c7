"""``localsession.mock(trace=FILE)`` and ``pytest --localsession-trace=DIR``: a test's ops as a
Chrome trace written when the mock exits (the fakes' engine, the unmodified SDK)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import localsession

pytest_plugins = ("pytester",)

PLUGIN = "localsession.mocking.pytest_plugin"

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"


def loop(steps: int) -> list[float]:
    from sagemaker.train.training_session import AdamParams, Datum, ModelInput, ServiceClient

    svc = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o")
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
    )
    losses = []
    with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
        for _ in range(steps):
            fb = tc.forward_backward([datum], "cross_entropy")
            tc.optim_step(AdamParams(learning_rate=1e-3)).result()
            losses.append(fb.result().metrics["loss"])
    return losses


def spans(path: Path) -> list[dict[str, Any]]:
    events = json.loads(path.read_text())["traceEvents"]
    return sorted((e for e in events if e["ph"] == "X" and e["tid"] == 1), key=lambda e: e["ts"])


def test_the_mock_writes_its_ops_trace_on_exit(tmp_path: Path) -> None:
    out = tmp_path / "ci" / "loop.trace.json"
    with localsession.mock(engine="fake", trace=out):
        losses = loop(3)
        assert not out.exists()  # written on exit
    ops = spans(out)
    assert [e["args"]["seq"] for e in ops] == [1, 2, 3, 4, 5, 6]
    assert [e["args"]["kind"] for e in ops] == ["forwardBackward", "optimizerStep"] * 3
    # the losses the SDK returned are the trace's, op for op
    assert [e["args"]["loss"] for e in ops[::2]] == pytest.approx(losses, rel=1e-9)
    assert not list(out.parent.glob("*.partial"))


USER_TEST = """
import pytest
from sagemaker.train.training_session import AdamParams, ServiceClient

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"


@pytest.mark.localsession_mock(engine="fake")
def test_two_steps(localsession_mock):
    svc = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o")
    with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
        tc.optim_step(AdamParams(learning_rate=1e-3)).result()
        tc.optim_step(AdamParams(learning_rate=1e-3)).result()
"""


@pytest.mark.slow  # a pytest run in a subprocess: ~11 s on the shared 2-core box
def test_the_fixture_writes_one_trace_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_loop=USER_TEST)
    folder = pytester.path / "traces"
    # Installed (pip install -e .): the entry point loads the plugin; else name it.
    installed = any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", PLUGIN]
    result = pytester.runpytest_subprocess(
        *load, "-p", "no:cacheprovider", "-q", f"--localsession-trace={folder}"
    )
    result.assert_outcomes(passed=1)
    (written,) = folder.glob("*.trace.json")
    assert "test_two_steps" in written.name
    assert [e["args"]["kind"] for e in spans(written)] == ["optimizerStep"] * 2
