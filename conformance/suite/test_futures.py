"""Futures: result / await / done / exception, pipelining and the order of training ops
(docs/wire.md#5, #6)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, adam, logprobs, result, sft


def test_result_returns_typed_outputs(backend: Backend, ts: Any, training_client: Any) -> None:
    fb = training_client.forward_backward([sft(ts, TEXT_A)], "cross_entropy")
    step = training_client.optim_step(adam(ts, backend))
    out = result(fb, backend)
    assert isinstance(out, ts.ForwardBackwardOutput)
    assert isinstance(result(step, backend), ts.OptimStepResponse)
    assert isinstance(out.metrics, dict) and len(out.loss_fn_outputs) == 1
    assert isinstance(fb.operation_id, str) and fb.operation_id
    assert fb.cancel() is False and fb.cancelled() is False


def test_done_and_exception_after_a_wait(backend: Backend, ts: Any, training_client: Any) -> None:
    fb = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    assert fb.exception(timeout=backend.limits.op_timeout_s) is None
    assert fb.done() is True
    assert result(fb, backend) is result(fb, backend)  # memoised: the same object


def test_done_is_false_until_a_wait_learns_the_outcome(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """The SDK's ``done()``: an op that finished on the service but that nobody waited on is
    not done; the wait that reads its result makes it done."""
    first = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    second = training_client.forward([sft(ts, TEXT_B)], "cross_entropy")
    result(second, backend)  # training ops run in order, so `first` has finished too
    assert second.done() is True
    assert first.done() is False
    result(first, backend)
    assert first.done() is True


def test_a_failed_poll_leaves_done_false(
    backend: Backend, ts: Any, new_training_client: Any
) -> None:
    """A request that fails (polling a deleted session) is no outcome: ``done()`` stays False,
    so a ``while not f.done()`` loop behaves as it would against the service."""
    tc = new_training_client()
    orphan = tc.forward([sft(ts, TEXT_A)], "cross_entropy")
    result(tc.forward([sft(ts, TEXT_B)], "cross_entropy"), backend)
    tc.delete(stop_if_active=True)
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the service's error, any class
        orphan.result(timeout=backend.limits.op_timeout_s)
    assert not isinstance(failure.value, TimeoutError)
    assert orphan.done() is False


def test_sequence_numbers_count_from_one(backend: Backend, ts: Any, training_client: Any) -> None:
    assert training_client.current_sequence_number == 0
    futures = [
        training_client.forward([sft(ts, TEXT_A)], "cross_entropy"),
        training_client.optim_step(adam(ts, backend)),
        training_client.save_weights_for_sampler(),
    ]
    assert training_client.current_sequence_number == 3
    for future in futures:
        result(future, backend)
    assert training_client.current_sequence_number == 3  # reading allocates nothing


def test_pipelined_ops_equal_waited_ops(
    backend: Backend, ts: Any, new_training_client: Any
) -> None:
    """Submitting a whole loop before waiting gives what waiting after each op gives."""
    batch = [sft(ts, TEXT_A)]

    def loop(tc: Any, wait_each: bool) -> list[float]:
        futures = []
        for _ in range(2):
            futures.append(tc.forward_backward(batch, "cross_entropy"))
            futures.append(tc.optim_step(adam(ts, backend)))
            if wait_each:
                [result(f, backend) for f in futures]
        futures.append(tc.forward(batch, "cross_entropy"))
        return [x for lp in logprobs(result(futures[-1], backend)) for x in lp]

    piped = loop(new_training_client(), wait_each=False)
    waited = loop(new_training_client(), wait_each=True)
    assert piped == pytest.approx(waited, abs=backend.limits.logprob_atol)


def test_training_ops_run_in_call_order(backend: Backend, ts: Any, training_client: Any) -> None:
    """forward, optim_step, forward submitted together: the first forward sees the weights
    before the step, the second after it, and a third (no step between) equals the second."""
    batch = [sft(ts, TEXT_A)]
    training_client.forward_backward(batch, "cross_entropy")
    before = training_client.forward(batch, "cross_entropy")
    training_client.optim_step(adam(ts, backend))
    after = training_client.forward(batch, "cross_entropy")
    again = training_client.forward(batch, "cross_entropy")
    lp_before, lp_after, lp_again = (
        logprobs(result(f, backend))[0] for f in (before, after, again)
    )
    assert lp_after == pytest.approx(lp_again, abs=1e-6)
    assert max(abs(a - b) for a, b in zip(lp_before, lp_after, strict=True)) > 1e-4
    # Training on TEXT_A makes its (weighted) targets more likely.
    weights = [0.0] + [1.0] * (len(TEXT_A) - 2) + [0.0]
    gain = sum(w * (a - b) for w, a, b in zip(weights, lp_after, lp_before, strict=True))
    assert gain > 0


def test_futures_resolve_in_sequence_order(backend: Backend, ts: Any, training_client: Any) -> None:
    """Waiting on the last op first: once it is done, every earlier op is done too (each
    resolves on its first poll; the wait allowed is only a hang detector, since one poll
    over a loaded machine's HTTP may take seconds)."""
    futures = [training_client.forward([sft(ts, TEXT_B)], "cross_entropy") for _ in range(5)]
    last = result(futures[-1], backend)
    assert len(last.loss_fn_outputs) == 1
    for future in futures[:-1]:
        assert future.exception(timeout=backend.limits.op_timeout_s) is None


def test_async_twins(backend: Backend, ts: Any, training_client: Any) -> None:
    async def run() -> tuple[Any, Any, Any]:
        fb = await training_client.forward_backward_async([sft(ts, TEXT_A)], "cross_entropy")
        step = await training_client.optim_step_async(adam(ts, backend))
        out = await fb
        sampler = training_client.create_sampling_client()
        logprob_list = await sampler.compute_logprobs_async(list(TEXT_B))
        return out, await step, logprob_list

    out, step, lp = asyncio.run(run())
    assert isinstance(out, ts.ForwardBackwardOutput)
    assert isinstance(step, ts.OptimStepResponse)
    assert len(lp) == len(TEXT_B) and lp[0] is None


def test_result_timeout_raises_timeout_error(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """A zero timeout on an op that has not been waited on raises TimeoutError (or returns,
    if it already finished); a later unbounded wait still gets the result."""
    futures = [training_client.forward([sft(ts, TEXT_A)] * 4, "cross_entropy") for _ in range(4)]
    try:
        futures[-1].result(timeout=0.0)
    except TimeoutError:
        pass
    assert len(result(futures[-1], backend).loss_fn_outputs) == 4
