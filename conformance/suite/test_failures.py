"""Failures: a failed op changes no state and later ops still run; ops after stop raise
(docs/semantics.md#4, docs/wire.md#6, #9)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, adam, logprobs, result, rl, sft


def _bad_ppo(ts: Any) -> Any:
    # `advantages` is not length-checked by the SDK (docs/wire.md#5): the service must catch it.
    n = len(TEXT_B)
    return rl(ts, TEXT_B, logprobs=[-5.0] * n, advantages=[1.0] * (n + 3))


@pytest.mark.requires("failure.isolated")
def test_failed_op_fails_alone(backend: Backend, ts: Any, training_client: Any) -> None:
    bad = training_client.forward_backward([_bad_ppo(ts)], "ppo")
    good = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    with pytest.raises(ts.OperationError) as info:
        result(bad, backend)
    assert info.value.operation_type == "training"
    assert isinstance(bad.exception(timeout=backend.limits.op_timeout_s), ts.OperationError)
    with pytest.raises(ts.OperationError):
        result(bad, backend)  # memoised: a second wait raises again
    assert len(result(good, backend).loss_fn_outputs) == 1


@pytest.mark.requires("failure.isolated")
def test_failed_forward_backward_adds_no_gradient(
    backend: Backend, ts: Any, new_training_client: Any
) -> None:
    """A session that ran a failing forward_backward (half of whose batch was valid) then
    trains exactly like one that never ran it."""
    good = [sft(ts, TEXT_A)]
    n = len(TEXT_A)
    half_bad = [rl(ts, TEXT_A, logprobs=[-5.0] * n, advantages=[1.0] * n), _bad_ppo(ts)]

    def run(with_failure: bool) -> list[float]:
        tc = new_training_client()
        if with_failure:
            failed = tc.forward_backward(half_bad, "ppo")
        tc.forward_backward(good, "cross_entropy")
        tc.optim_step(adam(ts, backend))
        out = tc.forward(good, "cross_entropy")
        if with_failure:
            with pytest.raises(ts.OperationError):
                result(failed, backend)
        return logprobs(result(out, backend))[0]

    base = run(False)
    assert run(True) == pytest.approx(base, abs=1e-6)


@pytest.mark.requires("failure.isolated")
def test_failed_load_keeps_the_session_training(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """A load of a package that does not exist fails its op; the session keeps training."""
    arn = result(training_client.save_state(), backend).model_package_arn
    missing = arn.rsplit("/", 1)[0] + "/999999"
    load = training_client.load_state(missing)
    after = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    with pytest.raises((ts.OperationError, ClientError)):
        result(load, backend)
    assert len(result(after, backend).loss_fn_outputs) == 1


def test_ops_after_stop_raise_at_the_call(backend: Backend, ts: Any, training_client: Any) -> None:
    sampler = training_client.create_sampling_client()
    result(training_client.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)
    training_client.stop()
    with pytest.raises(ts.TrainingSessionError):
        training_client.forward_backward([sft(ts, TEXT_A)], "cross_entropy")
    with pytest.raises(ts.TrainingSessionError):
        training_client.optim_step(adam(ts, backend))
    with pytest.raises(ts.TrainingSessionError):
        training_client.save_state()
    with pytest.raises(ts.TrainingSessionError):
        sampler.sample(ts.ModelInput.from_ints(list(TEXT_A)), 1, ts.SamplingParams())


@pytest.mark.requires("stop.skips_queued")
def test_stop_skips_queued_ops_and_keeps_results(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """Ops queued when the session stops end Skipped (OperationError); the ops that finished
    are a prefix of the sequence and their results stay readable."""
    batch = [sft(ts, TEXT_A)] * 8
    first = training_client.forward(batch, "cross_entropy")
    result(first, backend)
    queued = [training_client.forward_backward(batch, "cross_entropy") for _ in range(12)]
    training_client.stop()
    outcomes = []
    for future in queued:
        try:
            future.result(timeout=backend.limits.op_timeout_s)
            outcomes.append(True)
        except (ts.OperationError, ts.TrainingSessionError):
            outcomes.append(False)
    assert outcomes == sorted(outcomes, reverse=True), outcomes  # done ops form a prefix
    assert len(result(first, backend).loss_fn_outputs) == 8


@pytest.mark.requires("optim.empty_step_noop")
def test_optim_step_with_no_gradient_changes_nothing(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    batch = [sft(ts, TEXT_A)]
    training_client.forward_backward(batch, "cross_entropy")
    training_client.optim_step(adam(ts, backend))
    before = training_client.forward(batch, "cross_entropy")
    training_client.optim_step(adam(ts, backend))  # nothing accumulated since the last step
    after = training_client.forward(batch, "cross_entropy")
    assert logprobs(result(after, backend)) == logprobs(result(before, backend))
