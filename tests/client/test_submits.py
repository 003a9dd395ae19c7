"""In-process submits and futures: a throttled submit never holds the caller, order is kept,
and a future resolves on the runtime's event (no polling) but, as the SDK's, reports
``done()`` only once a wait has learnt its outcome."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from fakes import FakeServiceClient
from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData
from localsession.runtime.service import Service

TOKENS = [1, 72, 101, 108, 108, 111, 33]
DATUM = Datum(
    model_input=ModelInput.from_ints(TOKENS),
    loss_fn_inputs={
        "target_tokens": TensorData(data=TOKENS[1:] + [0], dtype="int64"),
        "weights": TensorData(data=[1.0] * len(TOKENS)),
    },
)


def test_throttled_submits_return_at_once_in_order(
    client: ServiceClient, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    with client.create_lora_training_client("localsession/tiny", rank=4, alpha=8) as tc:
        release, waits = threading.Event(), []

        def backoff(seconds: float) -> None:  # the client's wait before a retry, held open
            waits.append(seconds)
            release.wait(30)

        monkeypatch.setattr(service, "backoff", backoff)
        service.faults.throttle_next(3)
        started = time.perf_counter()
        before = tc.forward([DATUM], "cross_entropy")
        trained = tc.forward_backward([DATUM], "cross_entropy")
        step = tc.optim_step(AdamParams(learning_rate=1e-2))
        after = tc.forward([DATUM], "cross_entropy")
        returned_in = time.perf_counter() - started
        # All four returned while the first submit's retry is still waiting out its backoff.
        deadline = time.monotonic() + 10
        while not waits:  # the retry is on the submitter's thread, waiting out its backoff
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert len(waits) == 1 and 0.0 <= waits[0] <= 0.5
        assert not any(f.done() for f in (before, trained, step, after))
        assert returned_in < 1.0, f"submits took {returned_in * 1e3:.1f} ms under throttling"
        release.set()
        first = before.result(timeout=60).metrics["loss"]
        # Sequence order: forward and forward_backward saw the same weights, the last forward
        # saw the updated ones.
        assert trained.result(timeout=60).metrics["loss"] == pytest.approx(first, rel=1e-5)
        step.result(timeout=60)
        assert after.result(timeout=60).metrics["loss"] < first
        assert [before.operation_id, after.operation_id] and tc.current_sequence_number == 4


def test_a_finished_op_is_done_only_once_waited_on(client: ServiceClient) -> None:
    with client.create_lora_training_client("localsession/tiny", rank=4, alpha=8) as tc:
        future = tc.forward([DATUM], "cross_entropy")
        later = tc.forward([DATUM], "cross_entropy")
        later.result(timeout=60)  # sequence order: `future` has finished as well
        assert future.done() is False  # the SDK's done(): nobody has waited on it
        assert future.result(timeout=0).metrics["loss"] > 0  # no waiting left to do
        assert future.done() is True


def test_fake_advance_then_a_wait_makes_done_true() -> None:
    with FakeServiceClient(manual=True) as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=4)
        future = tc.forward_backward([DATUM], "cross_entropy")
        step = tc.optim_step(AdamParams(learning_rate=1e-2))
        assert not future.done() and not step.done()
        fake.advance()
        assert future.done() is False  # finished, but not waited on (as the SDK's)
        with pytest.raises(TimeoutError):
            step.result(timeout=0.05)  # not run yet
        assert future.result(timeout=0).metrics["loss"] > 0
        assert future.done() is True and step.done() is False
        fake.advance()
        assert step.result(timeout=0).metrics["learning_rate"] == pytest.approx(1e-2)
        assert step.done() is True


def test_await_completes_on_the_event() -> None:
    with FakeServiceClient(manual=True) as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=4)
        future = tc.forward_backward([DATUM], "cross_entropy")

        async def wait() -> Any:
            task = asyncio.ensure_future(future.result_async(timeout=10))
            await asyncio.sleep(0.05)
            assert not task.done()
            fake.advance()
            return await task

        assert asyncio.run(wait()).metrics["loss"] > 0


def test_a_held_future_keeps_an_unreferenced_clients_session_until_it_goes(
    client: ServiceClient, service: Service
) -> None:
    """The SDK's auto-stop: a session whose clients are all collected is stopped, with a
    ResourceWarning, but not while a future of one of its ops is still held."""
    tc = client.create_lora_training_client("localsession/tiny", rank=4, alpha=8)
    name = tc.training_session_name
    future = tc.forward([DATUM], "cross_entropy")
    del tc
    gc.collect()
    assert service.session(name).status == "Running"
    assert future.result(timeout=60).metrics["loss"] > 0
    with pytest.warns(ResourceWarning, match="was not stopped explicitly"):
        del future
        gc.collect()
    assert service.session(name).status in ("Stopping", "Stopped")
