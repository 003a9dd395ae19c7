"""Training through the tinker SDK: loss values against closed forms, the order of queued
ops, what optim_step (and only optim_step) changes, save/load round trips, bad input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import close, datum, loss_of, step, wait


def test_cross_entropy_loss_sum_is_the_weighted_nll(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=0), backend)
    weights = [float(i % 3) for i in range(len(tokens) - 1)]  # 0, 1, 2, 0, ...
    out = wait(tc.forward([datum(backend, tokens, weights=weights)], "cross_entropy"), backend)
    logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
    assert len(logprobs) == len(tokens) - 1
    assert all(lp <= 0.0 for lp in logprobs)
    expected = -math.fsum(w * lp for w, lp in zip(weights, logprobs, strict=True))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    if backend.has("loss.outputs"):
        elementwise = out.loss_fn_outputs[0]["elementwise_loss"].tolist()
        assert elementwise == pytest.approx(
            [-w * lp for w, lp in zip(weights, logprobs, strict=True)], rel=1e-5, abs=1e-6
        )


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo"])
def test_policy_losses_at_ratio_one_are_minus_the_advantage_sum(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int], loss_fn: str
) -> None:
    tc = wait(new_trainer(seed=1), backend)
    n = len(tokens) - 1
    own = wait(tc.forward([datum(backend, tokens)], "cross_entropy"), backend)
    sampled = own.loss_fn_outputs[0]["logprobs"].tolist()  # q = p: every ratio is 1
    advantages = [0.5 * ((-1) ** i) * (i + 1) for i in range(n)]
    rl = datum(backend, tokens, logprobs=sampled, advantages=advantages)
    rl.loss_fn_inputs.pop("weights")
    out = wait(tc.forward_backward([rl], loss_fn), backend)
    # -Σ ratio·A with ratio 1 (inside any clip range): -Σ A
    assert out.metrics["loss:sum"] == pytest.approx(-math.fsum(advantages), abs=1e-3)


def test_queued_ops_run_in_submission_order(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=2), backend)
    types = backend.ts.types
    adam = types.AdamParams(learning_rate=backend.limits.learning_rate)
    before = tc.forward([datum(backend, tokens)], "cross_entropy")  # all four submitted
    fb = tc.forward_backward([datum(backend, tokens)], "cross_entropy")  # before any wait
    opt = tc.optim_step(adam)
    after = tc.forward([datum(backend, tokens)], "cross_entropy")
    first, trained, then = (
        float(wait(f, backend).metrics["loss:sum"]) for f in (before, fb, after)
    )
    wait(opt, backend)
    exact = backend.has("forward.bit_exact")
    assert close(trained, first, exact), "forward_backward ran after optim_step"
    assert then < first, "the forward queued after optim_step did not see the update"
    if backend.has("lora.seeded_init") and backend.has("determinism"):
        # the same ops, each waited for before the next, give the same numbers
        ref = wait(new_trainer(seed=2), backend)
        assert loss_of(backend, ref, tokens) == first
        assert step(backend, ref, tokens) == trained
        assert loss_of(backend, ref, tokens) == then


def test_only_optim_step_changes_the_weights(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=3), backend)
    exact = backend.has("forward.bit_exact")
    start = loss_of(backend, tc, tokens)
    assert start > 0.0, "a cross-entropy loss:sum (-Σ w·logp, w = 1) is positive"
    wait(tc.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    assert close(loss_of(backend, tc, tokens), start, exact), "forward_backward moved weights"
    losses = [step(backend, tc, tokens) for _ in range(4)]
    assert loss_of(backend, tc, tokens) < 0.9 * start, (start, losses)


@pytest.mark.requires("lora.zero_init")
def test_a_new_adapter_scores_like_the_base_model(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=4), backend)
    trained = wait(tc.forward([datum(backend, tokens)], "cross_entropy"), backend)
    base = wait(tinker_client.create_sampling_client(base_model=backend.base_model), backend)
    scored = wait(base.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    assert scored[0] is None
    assert scored[1:] == pytest.approx(
        trained.loss_fn_outputs[0]["logprobs"].tolist(), abs=backend.limits.logprob_atol
    )


def test_save_and_load_state_round_trip(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=5), backend)
    step(backend, tc, tokens)
    path = wait(tc.save_state("conformance-resume"), backend).path
    assert path.startswith("tinker://")
    saved = loss_of(backend, tc, tokens)
    next_step = step(backend, tc, tokens)
    stepped = loss_of(backend, tc, tokens)
    exact = backend.has("checkpoint.exact")
    resumed = wait(tinker_client.create_training_client_from_state_with_optimizer(path), backend)
    assert close(loss_of(backend, resumed, tokens), saved, exact)
    assert close(step(backend, resumed, tokens), next_step, exact)
    # the step's update depends on Adam's moments: equal only if they were restored
    assert close(loss_of(backend, resumed, tokens), stepped, exact)
    weights_only = wait(tinker_client.create_training_client_from_state(path), backend)
    assert close(loss_of(backend, weights_only, tokens), saved, exact)


def test_sampler_weights_match_the_trainer(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    tc = wait(new_trainer(seed=6), backend)
    step(backend, tc, tokens)
    path = wait(tc.save_weights_for_sampler("conformance-sampler"), backend).path
    fwd = wait(tc.forward([datum(backend, tokens)], "cross_entropy"), backend)
    sampler = wait(tinker_client.create_sampling_client(model_path=path), backend)
    scored = wait(sampler.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    assert scored[1:] == pytest.approx(
        fwd.loss_fn_outputs[0]["logprobs"].tolist(), abs=backend.limits.logprob_atol
    )


def test_bad_input_is_refused_and_the_trainer_keeps_working(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    with pytest.raises(Exception):  # noqa: B017,PT011 - the SDK's error types vary by path
        wait(tinker_client.create_lora_training_client("no-such/model-conformance"), backend)
    tc = wait(new_trainer(seed=7), backend)
    start = loss_of(backend, tc, tokens)
    types = backend.ts.types
    short = types.Datum(  # one target fewer than input positions
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:-1], "weights": [1.0] * (len(tokens) - 2)},
    )
    with pytest.raises(Exception, match="(?i)target|length|shape|match"):
        wait(tc.forward_backward([short], "cross_entropy"), backend)
    if backend.has("failure.isolated"):
        wait(tc.optim_step(types.AdamParams(learning_rate=backend.limits.learning_rate)), backend)
        assert loss_of(backend, tc, tokens) == start  # the failed op left no gradient
    assert step(backend, tc, tokens) > 0.0
