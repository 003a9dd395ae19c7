"""One test per fault kind: the exception a user's loop sees, and what keeps working after.

The expected surfaces are the real SDK's (docs/wire.md#5, #6, #8): a failed op raises
``OperationError`` from ``result()``; a refused submit raises botocore's ``ClientError`` from
``result()`` (never at the call); throttling and 5xx refusals are retried with the same
sequence number up to 150 attempts; a stopped or expired session skips its queued ops and
refuses new ones with ``ConflictException``; a short ``compute_logprobs`` result raises
``ResultMismatchError``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fakes import FakeServiceClient
from localsession.exceptions import OperationError, ResultMismatchError
from localsession.types import AdamParams, Datum, ModelInput, SamplingParams

TOKENS = [257, 104, 105, 33]
DATUM = Datum(
    model_input=ModelInput.from_ints(TOKENS),
    loss_fn_inputs={"target_tokens": TOKENS[1:] + [258], "weights": [1.0] * len(TOKENS)},
)
LR = AdamParams(learning_rate=1e-3)


@pytest.fixture
def fake() -> Iterator[FakeServiceClient]:
    with FakeServiceClient() as client:
        yield client


@pytest.fixture
def tc(fake: FakeServiceClient) -> Any:
    return fake.create_lora_training_client("fakes/bigram", rank=4)


def train_step(tc: Any) -> float:
    loss = tc.forward_backward([DATUM], "cross_entropy").result(timeout=5).metrics["loss"]
    tc.optim_step(LR).result(timeout=5)
    return float(loss)


def error_code(exc: ClientError) -> tuple[str, int]:
    return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]


def test_op_failing_at_execution_raises_operation_error(fake: FakeServiceClient, tc: Any) -> None:
    fake.fail_next("forward_backward", message="CUDA out of memory")
    future = tc.forward_backward([DATUM], "cross_entropy")
    with pytest.raises(OperationError) as info:
        future.result(timeout=5)
    assert info.value.operation_type == "training"
    assert str(info.value) == f"training operation {future.operation_id} failed: CUDA out of memory"
    # The failed op added no gradient, and the session goes on.
    assert tc.optim_step(LR).result(timeout=5).metrics["grad_norm"] == 0.0
    train_step(tc)
    assert [c.status for c in fake.calls] == ["Failed", "Completed", "Completed", "Completed"]


def test_op_refused_at_submit_raises_client_error_at_result(
    fake: FakeServiceClient, tc: Any
) -> None:
    fake.fail_next("optim_step", at="submit", message="bad hyperparameters")
    future = tc.optim_step(LR)  # no exception at the call site
    with pytest.raises(ClientError) as info:
        future.result(timeout=5)
    assert error_code(info.value) == ("ValidationException", 400)
    assert "bad hyperparameters" in str(info.value)
    refused = fake.calls[0]
    assert (refused.status, refused.error_code, refused.attempts) == (
        "Refused",
        "ValidationException",
        1,
    )
    # Its sequence number is gone, yet later ops run (the gap is recorded lost at once).
    train_step(tc)
    assert [c.seq for c in fake.calls] == [1, 2, 3]


def test_transient_submit_refusals_are_retried_like_the_sdk(
    fake: FakeServiceClient, tc: Any
) -> None:
    fake.fail_next("forward_backward", 2, at="submit", code="InternalServerException")
    assert tc.forward_backward([DATUM], "cross_entropy").result(timeout=5).metrics["loss"] > 0
    assert (fake.calls[0].attempts, fake.calls[0].status) == (3, "Completed")


def test_throttled_requests_are_retried_then_surface_after_150(
    fake: FakeServiceClient, tc: Any
) -> None:
    fake.throttle_next(5)
    train_step(tc)  # five throttled submits, retried with the same number
    assert fake.calls[0].attempts == 6
    future = tc.forward_backward([DATUM], "cross_entropy")
    fake.throttle_next(2)  # now the polls are throttled: the future retries them
    assert future.result(timeout=10).metrics["loss"] > 0
    assert fake.faults.pending()["throttle"] == 0  # both were spent on polls
    fake.throttle_next(150)
    with pytest.raises(ClientError) as info:
        tc.optim_step(LR).result(timeout=5)
    assert error_code(info.value) == ("ThrottlingException", 429)
    assert fake.calls[-1].attempts == 150
    train_step(tc)  # the throttle is spent; the session never noticed


def test_expired_session_skips_queued_ops_and_refuses_new_ones() -> None:
    with FakeServiceClient(manual=True) as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=4)
        running = tc.forward_backward([DATUM], "cross_entropy")
        wait_in_progress(fake)
        queued = tc.optim_step(LR)
        fake.expire_session(tc)
        fake.run_until_idle()
        running.result(timeout=5)  # the op already running finishes
        with pytest.raises(OperationError, match="expired after inactivity"):
            queued.result(timeout=5)
        with pytest.raises(ClientError) as info:
            tc.forward_backward([DATUM], "cross_entropy").result(timeout=5)
        assert error_code(info.value) == ("ConflictException", 409)
        assert fake.calls[1].status == "Skipped"
        fresh = fake.create_lora_training_client("fakes/bigram", rank=4)  # the way on
        fake.set_manual(False)
        train_step(fresh)


def test_stopped_session_skips_queued_ops_and_refuses_new_ones() -> None:
    with FakeServiceClient(manual=True) as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=4)
        running = tc.forward_backward([DATUM], "cross_entropy")
        wait_in_progress(fake)
        queued = tc.forward_backward([DATUM], "cross_entropy")
        fake.stop_session(tc.training_session_name)  # stopped from outside the loop
        fake.run_until_idle()
        running.result(timeout=5)
        with pytest.raises(OperationError, match="stopped before this operation ran"):
            queued.result(timeout=5)
        with pytest.raises(ClientError) as info:
            tc.optim_step(LR).result(timeout=5)
        assert error_code(info.value) == ("ConflictException", 409)


def test_failing_saves_raise_and_the_next_save_works(fake: FakeServiceClient, tc: Any) -> None:
    train_step(tc)
    fake.fail_saves(2, message="S3 access denied")
    with pytest.raises(OperationError, match="S3 access denied"):
        tc.save_weights_and_get_sampling_client()
    with pytest.raises(OperationError, match="S3 access denied"):
        tc.save_state().result(timeout=5)
    assert tc.save_state().result(timeout=5).model_package_arn
    sampler = tc.save_weights_and_get_sampling_client()
    fake.script.on_prompt("hi!", "ok")
    response = sampler.sample(
        ModelInput.from_ints(TOKENS), sampling_params=SamplingParams(max_tokens=512)
    ).result(timeout=5)
    assert response.sequences[0].tokens == [111, 107, 258]


def test_short_logprobs_raise_result_mismatch(fake: FakeServiceClient, tc: Any) -> None:
    sampler = tc.create_sampling_client()
    fake.mismatch_logprobs_next()
    with pytest.raises(ResultMismatchError) as info:
        sampler.compute_logprobs(ModelInput.from_ints(TOKENS)).result(timeout=5)
    assert (info.value.expected, info.value.received) == (len(TOKENS), len(TOKENS) - 1)
    logprobs = sampler.compute_logprobs(ModelInput.from_ints(TOKENS)).result(timeout=5)
    assert len(logprobs) == len(TOKENS) and logprobs[0] is None


def test_failing_samples_raise_operation_error(fake: FakeServiceClient, tc: Any) -> None:
    sampler = tc.create_sampling_client()
    fake.fail_next("sample", message="sampler crashed")
    params = SamplingParams(max_tokens=512)
    with pytest.raises(OperationError) as info:
        sampler.sample(ModelInput.from_ints(TOKENS), sampling_params=params).result(timeout=5)
    assert info.value.operation_type == "sample" and "sampler crashed" in str(info.value)
    assert (
        sampler.sample(ModelInput.from_ints(TOKENS), sampling_params=params)
        .result(timeout=5)
        .sequences
    )


def wait_in_progress(fake: FakeServiceClient) -> None:
    deadline = time.monotonic() + 5
    while fake.calls[0].status != "InProgress":
        assert time.monotonic() < deadline
        time.sleep(0.001)
