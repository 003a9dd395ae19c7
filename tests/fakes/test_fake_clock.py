"""The manual clock: futures resolve only on ``advance()`` / ``run_until_idle()``, in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakes import FakeServiceClient
from localsession.exceptions import OperationError
from localsession.types import AdamParams, Datum, ModelInput, SamplingParams

TOKENS = [257, 104, 105, 33]
DATUM = Datum(
    model_input=ModelInput.from_ints(TOKENS),
    loss_fn_inputs={"target_tokens": TOKENS[1:] + [258], "weights": [1.0] * len(TOKENS)},
)
LR = AdamParams(learning_rate=1e-2)


@pytest.fixture
def fake() -> Iterator[FakeServiceClient]:
    with FakeServiceClient(manual=True) as client:
        yield client


@pytest.fixture
def tc(fake: FakeServiceClient) -> Any:
    return fake.create_lora_training_client("fakes/bigram", rank=4)


def wait_until(predicate: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.001)


def test_a_future_is_not_done_until_advanced(fake: FakeServiceClient, tc: Any) -> None:
    future = tc.forward_backward([DATUM], "cross_entropy")
    assert not future.done()
    with pytest.raises(TimeoutError, match="did not complete within"):
        future.result(timeout=0.05)
    assert not future.done()
    # The op has not run either: it waits at the engine.
    assert fake.calls[0].status in ("Pending", "InProgress")
    released = fake.advance()
    assert [c.method for c in released] == ["forward_backward"]
    assert future.result(timeout=5).metrics["loss"] > 0
    assert future.done()
    assert fake.advance() == []  # nothing left


def test_futures_resolve_in_sequence_order(fake: FakeServiceClient, tc: Any) -> None:
    first = tc.forward_backward([DATUM], "cross_entropy")
    step = tc.optim_step(LR)
    second = tc.forward_backward([DATUM], "cross_entropy")
    assert [c.seq for c in fake.advance()] == [1]
    first_loss = first.result(timeout=5).metrics["loss"]
    for later in (step, second):
        with pytest.raises(TimeoutError):
            later.result(timeout=0.05)
    assert [c.seq for c in fake.advance(2)] == [2, 3]
    assert step.result(timeout=5).metrics["learning_rate"] == 1e-2
    # The second forward ran after the optimizer step: the loss went down.
    assert second.result(timeout=5).metrics["loss"] < first_loss
    finished = [c.finished_at for c in fake.calls]
    assert finished == sorted(finished)


def test_a_fault_armed_before_advance_reaches_a_queued_op(fake: FakeServiceClient, tc: Any) -> None:
    future = tc.forward_backward([DATUM], "cross_entropy")
    wait_until(lambda: fake.calls[0].status == "InProgress")  # at the engine, waiting
    queued = tc.forward_backward([DATUM], "cross_entropy")
    fake.fail_next("forward_backward", message="late fault")
    assert len(fake.run_until_idle()) == 2
    future.result(timeout=5)
    with pytest.raises(OperationError, match="late fault"):
        queued.result(timeout=5)


def test_sampling_and_training_release_in_submission_order(
    fake: FakeServiceClient, tc: Any
) -> None:
    sampler = tc.create_sampling_client()
    fake.script.on_prompt("hi!", "yo")
    training = tc.forward_backward([DATUM], "cross_entropy")
    sample = sampler.sample(
        ModelInput.from_ints(TOKENS), sampling_params=SamplingParams(max_tokens=512)
    )
    assert [c.method for c in fake.advance()] == ["forward_backward"]
    training.result(timeout=5)
    with pytest.raises(TimeoutError):
        sample.result(timeout=0.05)
    assert [c.method for c in fake.run_until_idle()] == ["sample"]
    assert sample.result(timeout=5).sequences[0].tokens == [121, 111, 258]


def test_async_waiters_resolve_on_advance(fake: FakeServiceClient, tc: Any) -> None:
    async def scenario() -> float:
        future = tc.forward_backward([DATUM], "cross_entropy")
        waiter = asyncio.ensure_future(future.result_async(timeout=5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        fake.advance()
        result = await waiter
        return float(result.metrics["loss"])

    assert asyncio.run(scenario()) > 0


def test_automatic_mode_refuses_advance_and_leaving_manual_releases_all(
    fake: FakeServiceClient, tc: Any
) -> None:
    future = tc.forward_backward([DATUM], "cross_entropy")
    fake.set_manual(False)
    assert future.result(timeout=5).metrics["loss"] > 0
    with pytest.raises(RuntimeError, match="manual"):
        fake.advance()
