"""``gspo`` and ``stable_reinforce``, each part as spec or as localsession's choice.

Spec (Tinker's documentation, any backend): GSPO's value is the documented GSPO-token formula
over the trainer's own logprobs (``losses/gspo``); a sampler created with
``record_stability_info=True`` returns a ``sequence_id`` per sequence, and a training
request can name only sequences sampled in its own session, so a made-up id is the caller's
error (``losses/stable-reinforce``, ``datum`` "Provenance").

localsession's choice (``loss.stable_reinforce``, docs/semantics.md#1): the StableReinforce
objective itself, which Tinker does not publish."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import (
    datum,
    forward,
    fsum,
    logprobs_of,
    needs_sdk,
    user_error,
    wait,
)

#: The SDK feature behind sampling with stability info (and, in the same releases, provenance).
RECORDING = "param:TrainingClient.save_weights_and_get_sampling_client.record_stability_info"


@pytest.fixture
def trainer(new_trainer: Callable[..., Any]) -> Any:
    return new_trainer(seed=0)


@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.01, 3.0)])
def test_gspo_is_the_documented_token_level_formula(
    backend: Backend, trainer: Any, tokens: list[int], eps: tuple[float, float]
) -> None:
    """losses/gspo: ``s = exp(mean over sequence_ratio_mask of (lp - q))``; every token carries
    s; ``loss = -Σ min(s·A, clip(s, 1 - epsilon_low, 1 + epsilon_high)·A)``."""
    needs_sdk(backend, "loss:gspo")
    own = logprobs_of(backend, trainer, tokens)
    n = len(own)
    mask = [0.0 if t < n // 3 else 1.0 for t in range(n)]
    sampled = [p - (0.15 if t % 2 else -0.05) for t, p in enumerate(own)]
    advantages = [0.0 if t < n // 3 else (1.0 if t % 3 else -0.5) for t in range(n)]
    rl = datum(
        backend,
        tokens,
        weights=None,
        logprobs=sampled,
        advantages=advantages,
        sequence_ratio_mask=mask,
    )
    low, high = eps
    out = forward(backend, trainer, [rl], "gspo", config={"epsilon_low": low, "epsilon_high": high})
    marked = [p - q for p, q, m in zip(own, sampled, mask, strict=True) if m]
    s = math.exp(fsum(marked) / len(marked))
    clipped = min(max(s, 1 - low), 1 + high)
    expected = -fsum(min(s * a, clipped * a) for a in advantages)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


def _sample_recorded(backend: Backend, trainer: Any) -> Any:
    ts = backend.ts
    sampler = wait(
        trainer.save_weights_and_get_sampling_client(record_stability_info=True), backend
    )
    params = ts.types.SamplingParams(max_tokens=4, temperature=1.0, seed=3)
    prompt = ts.types.ModelInput.from_ints(list(backend.prompt))
    return wait(sampler.sample(prompt=prompt, num_samples=2, sampling_params=params), backend)


def _provenanced(
    backend: Backend, sequence_id: str, tokens: list[int], logprobs: list[float]
) -> Any:
    """The datum the cookbook's rl_loop builds for one sampled sequence."""
    types = backend.ts.types
    prompt, p = list(backend.prompt), len(backend.prompt)
    base = types.Datum(
        model_input=types.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * (p - 1) + tokens,
            "logprobs": [0.0] * (p - 1) + logprobs,
            "advantages": [0.0] * (p - 1) + [1.0] * len(tokens),
        },
    )
    return base.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, length=p),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=len(tokens) - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, offset=1, length=p - 1),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=len(tokens)),
        ],
    )


def test_recorded_samples_carry_distinct_sequence_ids(backend: Backend, trainer: Any) -> None:
    """losses/stable-reinforce: with record_stability_info=True "every sample from that client
    is recorded, and each returned sequence carries a sequence_id"."""
    needs_sdk(
        backend, "param:TrainingClient.save_weights_and_get_sampling_client.record_stability_info"
    )
    response = _sample_recorded(backend, trainer)
    ids = [s.sequence_id for s in response.sequences]
    assert len(ids) == 2 and all(ids) and len(set(ids)) == 2


def test_stable_reinforce_refuses_a_sequence_id_never_sampled(
    backend: Backend, trainer: Any
) -> None:
    """datum "Provenance": a training request can only name sequences sampled in its own
    session; an id no sampler returned is the caller's error, and names the id."""
    needs_sdk(backend, "loss:stable_reinforce", RECORDING)
    made_up = _provenanced(backend, "never-sampled-0", [5, 6, 7], [-1.0, -1.0, -1.0])
    user_error(
        backend,
        lambda: trainer.forward_backward([made_up], "stable_reinforce"),
        "never-sampled-0",
    )


@pytest.mark.requires("loss.stable_reinforce")
def test_stable_reinforce_objective(backend: Backend, trainer: Any) -> None:
    """docs/semantics.md#1 (localsession's choice): ``loss = -Σ over sampled positions of
    min(exp(lp - q_recorded), 2)·A·lp``, ``q_recorded`` the sampler's logprob of the token."""
    needs_sdk(backend, "loss:stable_reinforce", RECORDING)
    response = _sample_recorded(backend, trainer)
    seq = max(response.sequences, key=lambda s: len(s.tokens))  # one token is enough too
    tokens, q = list(seq.tokens), list(seq.logprobs)
    rl = _provenanced(backend, seq.sequence_id, tokens, q)
    p = len(backend.prompt)
    full = [*backend.prompt, *tokens]
    own = logprobs_of(backend, trainer, full)[p - 1 :]  # the sampled tokens' lp
    out = forward(backend, trainer, [rl], "stable_reinforce")
    expected = -fsum(min(math.exp(x - s), 2.0) * x for x, s in zip(own, q, strict=True))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)
