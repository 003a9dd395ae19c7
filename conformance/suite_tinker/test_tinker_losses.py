"""The built-in losses against their documented formulas (losses.mdx, "Basic loss functions"),
each computed here from the trainer's own ``logprobs`` output of the same weights:
cross_entropy, importance_sampling, ppo (default and configured clips), cispo and dro, their
sum reduction over tokens and datums, and the direction a policy-gradient step moves."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import (
    adam,
    approx_loss,
    datum,
    forward,
    fsum,
    logprobs_of,
    needs_sdk,
    wait,
)


@pytest.fixture
def trainer(new_trainer: Callable[..., Any]) -> Any:
    """A fresh LoRA trainer (seed 0)."""
    return new_trainer(seed=0)


def _rl(backend: Backend, tokens: list[int], sampled: list[float], advantages: list[float]) -> Any:
    """An RL datum: ``logprobs`` are the sampler's, no ``weights`` (losses.mdx inputs)."""
    return datum(backend, tokens, weights=None, logprobs=sampled, advantages=advantages)


def _shifted(own: list[float], ratios: list[float]) -> list[float]:
    """Sampling logprobs q with p/q = ratio at each position: q = p - log(ratio)."""
    return [p - math.log(r) for p, r in zip(own, ratios, strict=True)]


def _pattern(n: int, values: list[float]) -> list[float]:
    return [values[i % len(values)] for i in range(n)]


def test_cross_entropy_loss_sum_is_the_weighted_nll(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx cross_entropy: ``elementwise_loss = -target_logprobs * weights``,
    ``loss = elementwise_loss.sum()``; output ``logprobs: array[(N,), float]``."""
    weights = _pattern(len(tokens) - 1, [0.0, 1.0, 2.0])
    out = forward(backend, trainer, [datum(backend, tokens, weights=weights)])
    logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
    assert len(logprobs) == len(tokens) - 1
    expected = -fsum(w * lp for w, lp in zip(weights, logprobs, strict=True))
    assert out.metrics["loss:sum"] == approx_loss(backend, expected)


@pytest.mark.requires("loss.outputs")
def test_cross_entropy_elementwise_loss_output(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx cross_entropy: ``elementwise_loss = -target_logprobs * weights`` (returned
    per datum where the backend reports it: capability loss.outputs)."""
    weights = _pattern(len(tokens) - 1, [1.0, 0.5, 0.0])
    out = forward(backend, trainer, [datum(backend, tokens, weights=weights)])
    logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
    elementwise = out.loss_fn_outputs[0]["elementwise_loss"].tolist()
    assert elementwise == pytest.approx(
        [-w * lp for w, lp in zip(weights, logprobs, strict=True)], rel=1e-5, abs=1e-6
    )


def test_cross_entropy_logprobs_are_log_probabilities(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx: ``logprobs: array[(N,), float] - Log probabilities of predicted tokens``:
    one per target, each a finite log-probability (<= 0)."""
    logprobs = logprobs_of(backend, trainer, tokens)
    assert len(logprobs) == len(tokens) - 1
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs), logprobs


def test_zero_weights_give_zero_loss_and_still_logprobs(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx cross_entropy: the loss is ``(-target_logprobs * weights).sum()``, so all
    weights 0 give 0, while ``logprobs`` are still returned for every target."""
    zero = [0.0] * (len(tokens) - 1)
    out = forward(backend, trainer, [datum(backend, tokens, weights=zero)])
    assert out.metrics["loss:sum"] == pytest.approx(0.0, abs=1e-6)
    assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == len(tokens) - 1


def test_cross_entropy_is_linear_in_the_weights(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx: ``elementwise_loss = -target_logprobs * weights`` is linear in ``weights``:
    weights 3 give three times the loss of weights 1."""
    n = len(tokens) - 1
    one = forward(backend, trainer, [datum(backend, tokens)]).metrics["loss:sum"]
    three = forward(backend, trainer, [datum(backend, tokens, weights=[3.0] * n)])
    assert three.metrics["loss:sum"] == approx_loss(backend, 3 * one)


def test_loss_sum_adds_over_datums(backend: Backend, trainer: Any, tokens: list[int]) -> None:
    """losses.mdx: "Apply sum reduction to get the total loss"; ``loss:sum`` is "Sum of
    weighted cross-entropy losses", over every datum of the call, and ``loss_fn_outputs`` has
    one entry per datum (ForwardBackwardOutput: "List of per-datum dicts")."""
    short = tokens[: max(3, len(tokens) // 2)]
    a = forward(backend, trainer, [datum(backend, tokens)]).metrics["loss:sum"]
    b = forward(backend, trainer, [datum(backend, short)]).metrics["loss:sum"]
    both = forward(backend, trainer, [datum(backend, tokens), datum(backend, short)])
    assert len(both.loss_fn_outputs) == 2
    assert both.metrics["loss:sum"] == approx_loss(backend, a + b)
    assert len(both.loss_fn_outputs[1]["logprobs"].tolist()) == len(short) - 1


def test_forward_and_forward_backward_report_the_same_loss(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """training_client.py: ``forward`` "Compute forward pass without gradients" and
    ``forward_backward`` "Compute forward pass and backward pass": same weights, same loss."""
    plain = forward(backend, trainer, [datum(backend, tokens)])
    both = wait(trainer.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    assert both.metrics["loss:sum"] == approx_loss(backend, plain.metrics["loss:sum"])
    assert both.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(
        plain.loss_fn_outputs[0]["logprobs"].tolist(), abs=backend.limits.logprob_atol
    )


def test_loss_fn_output_type_is_named(backend: Backend, trainer: Any, tokens: list[int]) -> None:
    """forward_backward_output.py: ``loss_fn_output_type: str`` "The class name of the loss
    function output records", and each output is a ``TensorData``."""
    out = forward(backend, trainer, [datum(backend, tokens)])
    assert isinstance(out.loss_fn_output_type, str) and out.loss_fn_output_type
    assert isinstance(out.loss_fn_outputs[0]["logprobs"], backend.ts.types.TensorData)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
def test_policy_losses_at_ratio_one(
    backend: Backend, trainer: Any, tokens: list[int], loss_fn: str
) -> None:
    """losses.mdx: ``prob_ratio = exp(target_logprobs - sampling_logprobs)`` is 1 when the
    sampler's logprobs are the learner's; importance_sampling and ppo then give ``-sum(A)``,
    cispo ``-sum(p * A)`` (its clipped ratio, 1, times ``target_logprobs * advantages``)."""
    own = logprobs_of(backend, trainer, tokens)
    advantages = [0.5 * (-1) ** i * (i + 1) for i in range(len(own))]
    out = forward(backend, trainer, [_rl(backend, tokens, own, advantages)], loss_fn)
    if loss_fn == "cispo":
        expected = -fsum(p * a for p, a in zip(own, advantages, strict=True))
    else:
        expected = -fsum(advantages)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


def test_importance_sampling_weighs_by_the_ratio(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx importance_sampling: ``loss = -(exp(target_logprobs - sampling_logprobs) *
    advantages).sum()``, with sampler logprobs chosen so the ratios are 0.5, 2 and 1.5."""
    own = logprobs_of(backend, trainer, tokens)
    ratios = _pattern(len(own), [0.5, 2.0, 1.5])
    advantages = _pattern(len(own), [1.0, -0.5, 2.0, 0.25])
    out = forward(
        backend,
        trainer,
        [_rl(backend, tokens, _shifted(own, ratios), advantages)],
        "importance_sampling",
    )
    expected = -fsum(r * a for r, a in zip(ratios, advantages, strict=True))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(
        own, abs=backend.limits.logprob_atol
    )


def _ppo(ratios: list[float], advantages: list[float], low: float, high: float) -> float:
    """-sum(min(r * A, clip(r, low, high) * A)) (losses.mdx ppo)."""
    return -fsum(
        min(r * a, min(max(r, low), high) * a) for r, a in zip(ratios, advantages, strict=True)
    )


def test_ppo_clips_the_ratio_at_its_default_bounds(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx ppo: ``min(ratio * A, clamp(ratio, clip_low, clip_high) * A)`` summed and
    negated, "epsilon_low and epsilon_high ... currently fixed to 0.2": bounds 0.8 and 1.2."""
    own = logprobs_of(backend, trainer, tokens)
    ratios = _pattern(len(own), [0.5, 2.0, 1.1, 0.9, 3.0])
    advantages = _pattern(len(own), [1.0, 1.0, -1.0, -2.0, -1.0, 0.5])
    out = forward(
        backend, trainer, [_rl(backend, tokens, _shifted(own, ratios), advantages)], "ppo"
    )
    expected = _ppo(ratios, advantages, 0.8, 1.2)
    assert expected != pytest.approx(-fsum(r * a for r, a in zip(ratios, advantages, strict=True)))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


def test_ppo_takes_clip_thresholds_from_loss_fn_config(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx ppo "Example with custom clipping thresholds": ``loss_fn_config=
    {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}`` clips the ratio there."""
    own = logprobs_of(backend, trainer, tokens)
    ratios = _pattern(len(own), [0.85, 1.15, 1.05, 0.5])
    advantages = _pattern(len(own), [-1.0, 1.0, 1.0, -0.5, 2.0])
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
    rl = _rl(backend, tokens, _shifted(own, ratios), advantages)
    out = forward(backend, trainer, [rl], "ppo", config=config)
    expected = _ppo(ratios, advantages, 0.9, 1.1)
    assert expected != pytest.approx(_ppo(ratios, advantages, 0.8, 1.2), rel=1e-3)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


def test_cispo_weighs_logprobs_by_the_clipped_ratio(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx cispo: ``loss = -(clamp(ratio, clip_low, clip_high).detach() *
    target_logprobs * advantages).sum()``, with the documented config 0.8 / 1.2."""
    own = logprobs_of(backend, trainer, tokens)
    ratios = _pattern(len(own), [0.5, 1.0, 2.0])
    advantages = _pattern(len(own), [1.0, -1.0, 0.5, 2.0])
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    rl = _rl(backend, tokens, _shifted(own, ratios), advantages)
    out = forward(backend, trainer, [rl], "cispo", config=config)
    expected = -fsum(
        min(max(r, 0.8), 1.2) * p * a for r, p, a in zip(ratios, own, advantages, strict=True)
    )
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("beta", [0.05, 1.0])
def test_dro_adds_the_quadratic_penalty(
    backend: Backend, trainer: Any, tokens: list[int], beta: float
) -> None:
    """losses.mdx dro: ``dro_objective = target_logprobs * advantages - 0.5 * beta *
    (target_logprobs - sampling_logprobs) ** 2``, ``loss = -dro_objective.sum()``, beta from
    ``loss_fn_config={"beta": ...}``."""
    needs_sdk(backend, "loss:dro")
    own = logprobs_of(backend, trainer, tokens)
    ratios = _pattern(len(own), [0.5, 2.0, 1.0])
    sampled = _shifted(own, ratios)
    advantages = _pattern(len(own), [1.0, -0.5, 0.25])
    rl = _rl(backend, tokens, sampled, advantages)
    out = forward(backend, trainer, [rl], "dro", config={"beta": beta})
    expected = -fsum(
        p * a - 0.5 * beta * (p - q) ** 2 for p, q, a in zip(own, sampled, advantages, strict=True)
    )
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_policy_gradient_step_follows_the_advantage(
    backend: Backend, trainer: Any, tokens: list[int], sign: float
) -> None:
    """losses.mdx importance_sampling: ``advantages`` are "positive to reinforce, negative to
    discourage": one step with A = +1 raises the targets' logprobs, with A = -1 lowers them."""
    own = logprobs_of(backend, trainer, tokens)
    rl = _rl(backend, tokens, own, [sign] * len(own))
    wait(trainer.forward_backward([rl], "importance_sampling"), backend)
    wait(trainer.optim_step(adam(backend)), backend)
    after = logprobs_of(backend, trainer, tokens)
    moved = fsum(after) - fsum(own)
    assert sign * moved > 0.0, (own, after)


def test_gradients_accumulate_until_optim_step(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """index.mdx: ``forward_backward`` "compute and accumulate the gradients", ``optim_step``
    "update your model using the accumulated gradients": two forward_backward calls, one
    datum each, then a step, land where one call with both datums does, and not where a
    step on the first datum alone does."""
    short = tokens[: max(3, len(tokens) // 2)]
    split, joined, first_only = (new_trainer(seed=11) for _ in range(3))
    wait(split.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    wait(split.forward_backward([datum(backend, short)], "cross_entropy"), backend)
    both = [datum(backend, tokens), datum(backend, short)]
    wait(joined.forward_backward(both, "cross_entropy"), backend)
    wait(first_only.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    for trainer in (split, joined, first_only):
        wait(trainer.optim_step(adam(backend)), backend)
    after = [forward(backend, t, [datum(backend, short)]).metrics["loss:sum"]
             for t in (split, joined, first_only)]  # fmt: skip
    assert after[0] == approx_loss(backend, after[1])
    assert after[0] != pytest.approx(after[2], rel=1e-4), after
