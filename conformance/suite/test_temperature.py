"""Sampling temperature against the softmax on the SageMaker sampler: a temperature T draws
token x with probability ``p_x^(1/T) / sum_y p_y^(1/T)``, ``p`` the model's distribution
read through ``topk_prompt_logprobs`` (SamplingParams ``temperature``: "0 is greedy
decoding", checked by test_sampling.py::test_greedy_picks_the_most_likely_token).

The top token's share of N draws is compared with bounds from the top-k logprobs, at six
binomial standard deviations: with a fixed seed each backend draws the same every run, and
one that honours the temperature lands within the bounds with probability above 1 - 1e-8,
so the test cannot flake; one that ignores the temperature draws at T = 1, far outside them.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import params, result

#: Candidates read from topk_prompt_logprobs, and draws per temperature.
K, N = 20, 300
#: Binomial standard deviations allowed.
Z = 6.0


@pytest.fixture(scope="module")
def sampler(shared_training_client: Any) -> Any:
    """A sampler on the base model (the shared session never saves or loads)."""
    return shared_training_client.create_sampling_client()


def _next_token(backend: Backend, sampler: Any) -> tuple[list[float], list[int]]:
    """The top-K logprobs (highest first) and tokens after the prompt: the prompt-logprob
    row of one more token appended."""
    ts, prompt = backend.ts, list(backend.prompt)
    res = result(
        sampler.sample(
            ts.ModelInput.from_ints([*prompt, prompt[-1]]),
            1,
            params(backend, ts, 1, seed=0),
            topk_prompt_logprobs=K,
        ),
        backend,
    )
    row = sorted(res.topk_prompt_logprobs[-1], key=lambda t: -t.logprob)
    assert row, "topk_prompt_logprobs has no row for the appended token"
    return [float(t.logprob) for t in row], [int(t.token_id) for t in row]


def _first_tokens(backend: Backend, sampler: Any, temperature: float) -> list[int]:
    """The first token of N draws at ``temperature`` (one request, seed fixed)."""
    ts = backend.ts
    sp = params(backend, ts, 1, seed=1234, temperature=temperature)
    res = result(sampler.sample(ts.ModelInput.from_ints(list(backend.prompt)), N, sp), backend)
    assert len(res.sequences) == N
    return [int(seq.tokens[0]) for seq in res.sequences]


def _bounds(logprobs: list[float], temperature: float) -> tuple[float, float]:
    """Bounds on the tempered probability of the top token from the top-K logprobs: the
    unseen tail (mass ``1 - sum``, each token at most ``p_K``) adds at most
    ``p_K^(1/T - 1) * tail`` to the normaliser when T <= 1 (unbounded above when T > 1)."""
    inv = 1.0 / temperature
    powered = [math.exp(lp * inv) for lp in logprobs]
    tail = max(0.0, 1.0 - math.fsum(math.exp(lp) for lp in logprobs))
    upper = powered[0] / math.fsum(powered)
    extra = math.exp(logprobs[-1] * (inv - 1.0)) * tail if inv >= 1.0 else float("inf")
    return powered[0] / (math.fsum(powered) + extra), upper


def test_a_temperature_reshapes_the_distribution_as_the_softmax_says(
    backend: Backend, sampler: Any
) -> None:
    """SamplingParams ``temperature``: logits are divided by T before the softmax. The top
    token's share of N draws at T = 1, 0.25 and 2 (the service's ceiling) lies within the
    bounds that ``p^(1/T)`` gives from the top-k logprobs (plus six standard deviations)."""
    logprobs, tokens = _next_token(backend, sampler)
    slack = math.exp(backend.limits.logprob_atol) - 1.0  # the logprobs' own tolerance
    for temperature in (1.0, 0.25, 2.0):
        lower, upper = _bounds(logprobs, temperature)
        share = _first_tokens(backend, sampler, temperature).count(tokens[0]) / N
        sigma = math.sqrt(max(lower * (1 - lower), upper * (1 - upper), 1.0 / N) / N)
        low, high = lower * (1 - slack) - Z * sigma, upper * (1 + slack) + Z * sigma
        assert low <= share <= high, (
            f"SamplingParams.temperature={temperature:g}: the top token {tokens[0]} "
            f"(p = {math.exp(logprobs[0]):.4f} at T = 1) was drawn {share:.3f} of {N} times; "
            f"the softmax of logits / T gives {lower:.4f}..{upper:.4f} "
            f"(+-{Z:g} sigma: {low:.4f}..{high:.4f})"
        )
