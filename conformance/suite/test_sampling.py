"""Sampling: seeds, streams, stop strings and stop_reason, sampled and prompt logprobs,
top-k prompt logprobs, compute_logprobs (docs/wire.md#7, docs/semantics.md#3)."""

from __future__ import annotations

import concurrent.futures
import math
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, params, result


@pytest.fixture(scope="module")
def sampler(shared_training_client: Any) -> Any:
    """A sampler on the base model (the shared session never saves or loads)."""
    return shared_training_client.create_sampling_client()


def _sample(backend: Backend, ts: Any, sampler: Any, n: int = 1, **kwargs: Any) -> Any:
    prompt = kwargs.pop("prompt", list(backend.prompt))
    length = kwargs.pop("length", 6)
    extra = {
        k: kwargs.pop(k) for k in ("include_prompt_logprobs", "topk_prompt_logprobs") if k in kwargs
    }
    future = sampler.sample(
        ts.ModelInput.from_ints(prompt), n, params(backend, ts, length, **kwargs), **extra
    )
    return result(future, backend)


def test_sample_shapes(backend: Backend, ts: Any, sampler: Any) -> None:
    out = _sample(backend, ts, sampler, 3, seed=1)
    assert isinstance(out, ts.SampleResponse) and len(out.sequences) == 3
    for seq in out.sequences:
        assert seq.stop_reason in (ts.StopReason.STOP, ts.StopReason.LENGTH)
        assert 1 <= len(seq.tokens) <= max(6, backend.limits.min_max_tokens)
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        assert all(math.isfinite(x) and x <= 0.0 for x in seq.logprobs)


@pytest.mark.requires("sampling.reproducible_seeds")
def test_same_seed_same_tokens(backend: Backend, ts: Any, sampler: Any) -> None:
    first = _sample(backend, ts, sampler, 2, seed=1234, temperature=1.0)
    again = _sample(backend, ts, sampler, 2, seed=1234, temperature=1.0)
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert [s.logprobs for s in first.sequences] == [s.logprobs for s in again.sequences]


def test_samples_of_one_request_differ(backend: Backend, ts: Any, sampler: Any) -> None:
    out = _sample(backend, ts, sampler, 6, seed=77, temperature=1.0, length=8)
    assert len({tuple(s.tokens) for s in out.sequences}) > 1


@pytest.mark.requires("sampling.seed_streams")
def test_sample_i_uses_seed_plus_i(backend: Backend, ts: Any, sampler: Any) -> None:
    many = _sample(backend, ts, sampler, 3, seed=500, temperature=1.0)
    for i in range(3):
        one = _sample(backend, ts, sampler, 1, seed=500 + i, temperature=1.0)
        assert one.sequences[0].tokens == many.sequences[i].tokens


def test_greedy_ignores_the_seed(backend: Backend, ts: Any, sampler: Any) -> None:
    a = _sample(backend, ts, sampler, 2, seed=1, temperature=0.0)
    b = _sample(backend, ts, sampler, 1, seed=2, temperature=0.0)
    assert a.sequences[0].tokens == a.sequences[1].tokens == b.sequences[0].tokens


def test_greedy_picks_the_most_likely_token(backend: Backend, ts: Any, sampler: Any) -> None:
    """The first greedy token scores (compute_logprobs) as high as the best of the top-k
    prompt logprobs at its position: no other token is more likely."""
    prompt = list(backend.prompt)
    first = _sample(backend, ts, sampler, 1, temperature=0.0, prompt=prompt).sequences[0].tokens[0]
    chosen = result(sampler.compute_logprobs(prompt + [first]), backend)[-1]
    top = _sample(
        backend, ts, sampler, 1, temperature=0.0, prompt=prompt + [first], topk_prompt_logprobs=3
    ).topk_prompt_logprobs[-1]
    assert chosen == pytest.approx(max(t.logprob for t in top), abs=1e-4)


def test_stop_strings_end_generation(backend: Backend, ts: Any, sampler: Any) -> None:
    if backend.decode is None:
        pytest.skip("backend has no tokenizer to decode tokens with")
    stops = ["e", "a", "o", " "]
    out = _sample(
        backend, ts, sampler, 8, seed=3, stop=stops, length=max(64, backend.limits.min_max_tokens)
    )
    stopped = 0
    for seq in out.sequences:
        text = backend.decode(list(seq.tokens[:-1]))
        assert not any(s in text for s in stops), text  # nothing generated past a stop
        if seq.stop_reason == ts.StopReason.STOP:
            stopped += 1
    assert stopped > 0


@pytest.mark.requires("sampling.stop_inclusive")
def test_stop_token_is_returned(backend: Backend, ts: Any, sampler: Any) -> None:
    assert backend.decode is not None
    stops = ["e", "a", "o", " "]
    out = _sample(
        backend, ts, sampler, 8, seed=3, stop=stops, length=max(64, backend.limits.min_max_tokens)
    )
    for seq in out.sequences:
        if seq.stop_reason == ts.StopReason.STOP:
            text = backend.decode(list(seq.tokens))
            assert seq.tokens[-1] == backend.eos_token_id or any(text.endswith(s) for s in stops)


def test_stop_reason_length_means_max_tokens(backend: Backend, ts: Any, sampler: Any) -> None:
    length = max(4, backend.limits.min_max_tokens)
    out = _sample(backend, ts, sampler, 8, seed=11, length=length, stop=None)
    for seq in out.sequences:
        if seq.stop_reason == ts.StopReason.LENGTH:
            assert len(seq.tokens) == length
        else:
            assert len(seq.tokens) <= length
            if backend.eos_token_id is not None:
                assert seq.tokens[-1] == backend.eos_token_id
    if length <= 16:  # at most a few of 8 short samples can hit EOS on a byte model
        assert any(s.stop_reason == ts.StopReason.LENGTH for s in out.sequences)


def test_prompt_logprobs_match_compute_logprobs(backend: Backend, ts: Any, sampler: Any) -> None:
    prompt = list(TEXT_A)
    out = _sample(backend, ts, sampler, 1, seed=1, prompt=prompt, include_prompt_logprobs=True)
    scored = result(sampler.compute_logprobs(prompt), backend)
    assert len(scored) == len(prompt) and scored[0] is None
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
    assert out.prompt_logprobs[1:] == pytest.approx(scored[1:], abs=backend.limits.logprob_atol)
    assert all(x <= 0.0 for x in scored[1:])


@pytest.mark.requires("sampling.prompt_logprobs_zero_first")
def test_prompt_logprobs_first_entry_is_zero(backend: Backend, ts: Any, sampler: Any) -> None:
    out = _sample(
        backend, ts, sampler, 1, seed=1, prompt=list(TEXT_B), include_prompt_logprobs=True
    )
    assert out.prompt_logprobs[0] == 0.0


def test_topk_prompt_logprobs(backend: Backend, ts: Any, sampler: Any) -> None:
    prompt, k = list(TEXT_A), 4
    out = _sample(backend, ts, sampler, 1, seed=1, prompt=prompt, topk_prompt_logprobs=k)
    scored = result(sampler.compute_logprobs(prompt), backend)
    top = out.topk_prompt_logprobs
    assert top is not None and len(top) == len(prompt)
    for i in range(1, len(prompt)):
        values = [t.logprob for t in top[i]]
        assert len(values) == k and values == sorted(values, reverse=True)
        assert math.fsum(math.exp(v) for v in values) <= 1.0 + 1e-4
        ids = [t.token_id for t in top[i]]
        assert len(set(ids)) == k
        # the prompt's own token is either among the top k with its logprob, or below them
        if prompt[i] in ids:
            assert values[ids.index(prompt[i])] == pytest.approx(scored[i], abs=1e-4)
        else:
            assert scored[i] <= values[-1] + 1e-5


@pytest.mark.requires("sampling.batch_invariance", "sampling.reproducible_seeds")
def test_concurrent_requests_match_single_requests(backend: Backend, ts: Any, sampler: Any) -> None:
    """Requests sent together (batched by the backend) give what each gives alone."""
    seeds = [21, 22, 23, 24]
    alone = [_sample(backend, ts, sampler, 1, seed=s, temperature=1.0).sequences[0] for s in seeds]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(
            pool.map(
                lambda s: _sample(backend, ts, sampler, 1, seed=s, temperature=1.0).sequences[0],
                seeds,
            )
        )
    assert [s.tokens for s in together] == [s.tokens for s in alone]
    for a, b in zip(alone, together, strict=True):
        assert list(b.logprobs) == pytest.approx(list(a.logprobs), abs=1e-4)


def test_compute_logprobs_of_any_prompt_form(backend: Backend, ts: Any, sampler: Any) -> None:
    as_list = result(sampler.compute_logprobs(list(TEXT_B)), backend)
    as_input = result(sampler.compute_logprobs(ts.ModelInput.from_ints(list(TEXT_B))), backend)
    assert as_list == as_input and len(as_list) == len(TEXT_B) and as_list[0] is None


def test_sample_async_returns_the_result(backend: Backend, ts: Any, sampler: Any) -> None:
    import asyncio

    out = asyncio.run(
        sampler.sample_async(
            ts.ModelInput.from_ints(list(backend.prompt)), 2, params(backend, ts, 4, seed=3)
        )
    )
    assert isinstance(out, ts.SampleResponse) and len(out.sequences) == 2
