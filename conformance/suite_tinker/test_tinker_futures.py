"""Futures: ``APIFuture.result`` and ``result_async``, many queued ops resolving to their own
results in any waiting order, and the ``/api/v1/retrieve_future`` wire underneath them
(through the SDK's low-level ``AsyncTinker`` client)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat
from conformance.suite_tinker._kit import datum, user_error, wait


def test_result_is_stable_across_calls(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """api_future.py ``result``: "Get the result synchronously"; a finished future answers
    the same value every time."""
    tc = new_trainer(seed=20)
    future = tc.forward([datum(backend, tokens)], "cross_entropy")
    first, again = wait(future, backend), wait(future, backend)
    assert first.metrics == again.metrics


def test_result_async_equals_result(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """api_future.py: "The future can be awaited directly in async contexts ... Equivalent to
    await api_future.result_async()"; both give the synchronous result."""
    tc = new_trainer(seed=21)
    future = tc.forward([datum(backend, tokens)], "cross_entropy")
    awaited = asyncio.run(future.result_async(timeout=backend.limits.op_timeout_s))
    assert awaited.metrics["loss:sum"] == wait(future, backend).metrics["loss:sum"]


def test_queued_futures_resolve_to_their_own_results(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py: each call "returns an APIFuture at once"; six forwards of six
    lengths, submitted together and waited for last-first, each carry their own datum's
    ``logprobs`` (one per target)."""
    tc = new_trainer(seed=22)
    lengths = [3 + i for i in range(6) if 3 + i <= len(tokens)]
    futures = [tc.forward([datum(backend, tokens[:n])], "cross_entropy") for n in lengths]
    for n, future in reversed(list(zip(lengths, futures, strict=True))):
        out = wait(future, backend)
        assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == n - 1


def test_sampling_futures_resolve_independently(backend: Backend, sampler: Any) -> None:
    """sampling_client.py ``sample``: "Returns: An APIFuture containing the SampleResponse";
    concurrent requests of different ``max_tokens`` each answer their own."""
    types = backend.ts.types
    prompt = types.ModelInput.from_ints(list(backend.prompt))
    sizes = [1, 4, 2, 3]
    futures = [
        sampler.sample(
            prompt,
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=n, seed=n, stop=[]),
        )
        for n in sizes
    ]
    for n, future in zip(sizes, futures, strict=True):
        assert len(wait(future, backend).sequences[0].tokens) == n


def test_two_trainers_queues_do_not_block_each_other(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """service_client.py ``create_lora_training_client``: models are independent; a future
    of one trainer resolves while the other has ops queued."""
    a, b = new_trainer(seed=23), new_trainer(seed=23)
    queued = [a.forward([datum(backend, tokens)], "cross_entropy") for _ in range(3)]
    mine = wait(b.forward([datum(backend, tokens)], "cross_entropy"), backend)
    assert mine.metrics["loss:sum"] > 0.0
    assert all(wait(f, backend).metrics["loss:sum"] > 0.0 for f in queued)


def _low_level(backend: Backend) -> Any:
    return compat.low_level_client(backend.ts, backend.details["base_url"])


async def _retrieve(backend: Backend, client: Any, request_id: str) -> Any:
    """Poll ``/api/v1/retrieve_future`` until the answer is not ``try_again``."""
    types = backend.ts.types
    request = types.FutureRetrieveRequest(request_id=request_id)
    for _ in range(int(backend.limits.op_timeout_s)):
        raw = await client.futures.with_raw_response.retrieve(request=request)
        answer = raw.json()
        answer = await answer if inspect.isawaitable(answer) else answer
        if answer.get("type") != "try_again":
            return answer
        assert answer["queue_state"] in ("active", "paused_capacity", "paused_rate_limit")
        await asyncio.sleep(0.5)
    raise AssertionError(f"{request_id} still try_again after {backend.limits.op_timeout_s} polls")


def test_retrieve_future_answers_a_save(backend: Backend, new_trainer: Callable[..., Any]) -> None:
    """resources/futures.py ``retrieve``: "Retrieves the result of a future by its ID";
    types/future_retrieve_response.py: a ``TryAgainResponse`` while pending, then the op's
    response: here a ``SaveWeightsResponse`` whose ``path`` is a ``tinker://`` path."""
    tc = new_trainer(seed=24)
    types = backend.ts.types

    async def run() -> Any:
        client = _low_level(backend)
        request = types.SaveWeightsRequest(model_id=tc.model_id, path="raw-save", seq_id=1)
        untyped = await client.weights.save(request=request)
        return await _retrieve(backend, client, untyped.request_id)

    answer = asyncio.run(run())
    path = answer.get("path")
    assert isinstance(path, str) and path.startswith("tinker://"), answer


def test_retrieve_future_of_an_unknown_id_is_refused(backend: Backend) -> None:
    """resources/futures.py ``retrieve`` "by its ID": an ID the server never issued is the
    caller's error (a 4xx), not a server fault and not an endless ``try_again``."""
    types = backend.ts.types

    async def run() -> Any:
        client = _low_level(backend)
        return await client.futures.retrieve(
            request=types.FutureRetrieveRequest(request_id="conformance-no-such-request"),
            max_retries=0,
        )

    class Call:
        def result(self, timeout: float | None = None) -> Any:
            return asyncio.run(run())

    user_error(backend, Call)


@pytest.mark.parametrize("n", [2, 5])
def test_many_saves_in_flight_all_land(
    backend: Backend, new_trainer: Callable[..., Any], n: int
) -> None:
    """training_client.py ``save_state``: "Returns: APIFuture containing the save response
    with checkpoint path"; ``n`` saves queued at once give ``n`` distinct paths."""
    tc = new_trainer(seed=25)
    futures = [tc.save_state(f"conformance-many-{n}-{i}") for i in range(n)]
    paths = [wait(f, backend).path for f in futures]
    assert len(set(paths)) == n and all(p.startswith("tinker://") for p in paths)
