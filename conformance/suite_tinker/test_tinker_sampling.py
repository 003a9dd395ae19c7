"""Sampling through the tinker SDK: seeds, lengths and stop reasons, stop token ids, and
sampled and prompt logprobs that agree with the model's own scoring."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import wait

MAX_TOKENS = 10


@pytest.fixture
def sampler(backend: Backend, tinker_client: Any) -> Any:
    """A sampling client on the base model (read-only: never trained)."""
    return wait(tinker_client.create_sampling_client(base_model=backend.base_model), backend)


def draw(backend: Backend, sampler: Any, seed: int, n: int = 3, stop: Any = None) -> Any:
    types = backend.ts.types
    params = types.SamplingParams(max_tokens=MAX_TOKENS, seed=seed, temperature=1.0, stop=stop)
    prompt = types.ModelInput.from_ints(list(backend.prompt))
    return wait(sampler.sample(prompt, num_samples=n, sampling_params=params), backend)


def test_num_samples_max_tokens_and_stop_reasons(backend: Backend, sampler: Any) -> None:
    res = draw(backend, sampler, seed=1, n=3)
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= MAX_TOKENS
        assert seq.stop_reason in ("length", "stop")
        assert (seq.stop_reason == "length") == (len(seq.tokens) == MAX_TOKENS) or (
            backend.eos_token_id is not None and seq.tokens[-1] == backend.eos_token_id
        )
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)


@pytest.mark.requires("sampling.reproducible_seeds")
def test_seeded_sampling_is_reproducible(backend: Backend, sampler: Any) -> None:
    a, b = draw(backend, sampler, seed=11), draw(backend, sampler, seed=11)
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    assert [s.logprobs for s in a.sequences] == [s.logprobs for s in b.sequences]
    other = draw(backend, sampler, seed=12)
    assert [s.tokens for s in other.sequences] != [s.tokens for s in a.sequences]


@pytest.mark.requires("sampling.reproducible_seeds")
def test_a_stop_token_id_ends_the_sequence(backend: Backend, sampler: Any) -> None:
    free = draw(backend, sampler, seed=21, n=1).sequences[0]
    assert len(free.tokens) >= 3, "need a sample of a few tokens to pick a stop id from"
    stop_id = free.tokens[2]
    first = free.tokens.index(stop_id)
    cut = draw(backend, sampler, seed=21, n=1, stop=[stop_id]).sequences[0]
    assert cut.stop_reason == "stop"
    if backend.has("sampling.stop_inclusive"):
        assert cut.tokens == free.tokens[: first + 1]
    else:
        assert cut.tokens in (free.tokens[:first], free.tokens[: first + 1])


def test_sampled_logprobs_match_compute_logprobs(backend: Backend, sampler: Any) -> None:
    seq = draw(backend, sampler, seed=31, n=1).sequences[0]
    prompt = list(backend.prompt)
    full = backend.ts.types.ModelInput.from_ints(prompt + seq.tokens)
    scored = wait(sampler.compute_logprobs(full), backend)
    assert len(scored) == len(prompt) + len(seq.tokens) and scored[0] is None
    tail = scored[len(prompt) :]  # at temperature 1 the sampler's and the scorer's agree
    mse = sum((a - b) ** 2 for a, b in zip(tail, seq.logprobs, strict=True)) / len(tail)
    assert mse <= backend.limits.logprob_mse, (tail, seq.logprobs)


def test_prompt_logprobs_match_compute_logprobs(backend: Backend, sampler: Any) -> None:
    types = backend.ts.types
    tokens = [*backend.prompt, 32, 119, 111, 114, 108, 100]
    prompt = types.ModelInput.from_ints(tokens)
    scored = wait(sampler.compute_logprobs(prompt), backend)
    res = wait(
        sampler.sample(
            prompt,
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=1, seed=0),
            include_prompt_logprobs=True,
        ),
        backend,
    )
    assert res.prompt_logprobs[0] is None and len(res.prompt_logprobs) == len(tokens)
    assert res.prompt_logprobs[1:] == pytest.approx(scored[1:], abs=backend.limits.logprob_atol)


def test_a_prompt_beyond_the_vocabulary_is_refused(backend: Backend, sampler: Any) -> None:
    types = backend.ts.types
    bad = types.ModelInput.from_ints([*backend.prompt, 2**31 - 1])
    with pytest.raises(Exception, match="(?i)token|vocab|range"):
        wait(sampler.compute_logprobs(bad), backend)
