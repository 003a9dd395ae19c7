"""Sampling temperature against the softmax: ``SamplingParams.temperature`` 0 is greedy, and a
temperature T draws token x with probability ``p_x^(1/T) / sum_y p_y^(1/T)``, ``p`` the
model's distribution (read through ``topk_prompt_logprobs``).

Counts of the most likely token over many draws are compared with bounds from the top-k
logprobs, at six binomial standard deviations: with a fixed seed each backend's draw is the
same every run, and a backend that honours the temperature lands within the bounds with
probability above 1 - 1e-8, so the test cannot flake; one that ignores it draws at T = 1.
"""

from __future__ import annotations

import math
from typing import Any

from conformance.adapter import Backend
from conformance.suite_tinker._kit import wait

#: Candidates read from topk_prompt_logprobs, and draws per temperature.
K, N = 20, 300
#: Binomial standard deviations allowed.
Z = 6.0


def _next_token_logprobs(
    backend: Backend, sampler: Any, prompt: list[int]
) -> tuple[list[float], list[int]]:
    """The top-K logprobs (highest first) of the token after ``prompt``: the prompt-logprob
    row of one more token appended."""
    types = backend.ts.types
    res = wait(
        sampler.sample(
            types.ModelInput.from_ints([*prompt, prompt[-1]]),
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=1, seed=0),
            include_prompt_logprobs=True,
            topk_prompt_logprobs=K,
        ),
        backend,
    )
    row = res.topk_prompt_logprobs[len(prompt)]
    assert row, "topk_prompt_logprobs has no row for the appended token"
    return [float(lp) for _, lp in row], [int(t) for t, _ in row]


def _draws(backend: Backend, sampler: Any, prompt: list[int], temperature: float) -> list[int]:
    """The first token of N draws at ``temperature`` (one request, seed fixed)."""
    types = backend.ts.types
    params = types.SamplingParams(max_tokens=1, seed=1234, temperature=temperature, stop=[])
    res = wait(
        sampler.sample(types.ModelInput.from_ints(prompt), num_samples=N, sampling_params=params),
        backend,
    )
    assert len(res.sequences) == N
    return [int(seq.tokens[0]) for seq in res.sequences]


def _bounds(logprobs: list[float], temperature: float) -> tuple[float, float]:
    """Bounds on the tempered probability of the top token from the top-K logprobs: the
    unknown tail (mass ``1 - sum``, each token at most ``p_K``) adds at most
    ``p_K^(1/T - 1) * tail`` to the normaliser when T < 1, and at least nothing."""
    inv = 1.0 / temperature
    powered = [math.exp(lp * inv) for lp in logprobs]
    tail = max(0.0, 1.0 - math.fsum(math.exp(lp) for lp in logprobs))
    upper = powered[0] / math.fsum(powered)
    extra = math.exp(logprobs[-1] * (inv - 1.0)) * tail if inv >= 1.0 else float("inf")
    lower = powered[0] / (math.fsum(powered) + extra)
    return lower, upper


def test_temperature_zero_is_greedy(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``temperature``: 0 samples the most likely token: every draw is
    the top token of ``topk_prompt_logprobs``."""
    prompt = list(backend.prompt)
    _, tokens = _next_token_logprobs(backend, sampler, prompt)
    drawn = set(_draws(backend, sampler, prompt, 0.0)[:20])
    assert drawn == {tokens[0]}, (
        f"SamplingParams.temperature=0 (greedy) drew {sorted(drawn)}, not only the top token "
        f"{tokens[0]}"
    )


def test_a_temperature_reshapes_the_distribution_as_the_softmax_says(
    backend: Backend, sampler: Any
) -> None:
    """sampling_params.py ``temperature``: logits are divided by T before the softmax. The
    top token's share of N draws at T = 1, 0.1 and 3 must lie within the bounds that
    ``p^(1/T)`` gives from the top-k logprobs (plus six standard deviations)."""
    prompt = list(backend.prompt)
    logprobs, tokens = _next_token_logprobs(backend, sampler, prompt)
    slack = math.exp(backend.limits.logprob_atol) - 1.0  # the logprobs' own tolerance
    for temperature in (1.0, 0.1, 3.0):
        lower, upper = _bounds(logprobs, temperature)
        share = _draws(backend, sampler, prompt, temperature).count(tokens[0]) / N
        sigma = math.sqrt(max(lower * (1 - lower), upper * (1 - upper), 1.0 / N) / N)
        low, high = lower * (1 - slack) - Z * sigma, upper * (1 + slack) + Z * sigma
        assert low <= share <= high, (
            f"SamplingParams.temperature={temperature:g}: the top token {tokens[0]} "
            f"(p = {math.exp(logprobs[0]):.4f} at T = 1) was drawn {share:.3f} of {N} times; "
            f"the softmax of logits / T gives {lower:.4f}..{upper:.4f} "
            f"(+-{Z:g} sigma: {low:.4f}..{high:.4f})"
        )
