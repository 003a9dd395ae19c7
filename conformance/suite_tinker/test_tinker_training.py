"""Training through the tinker SDK: the order of queued ops, what optim_step (and only
optim_step) changes, AdamW's documented hyperparameters, and the sampler's view of the
trained weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import (
    adam,
    close,
    datum,
    logprobs_of,
    loss_of,
    step,
    wait,
)


def test_queued_ops_run_in_submission_order(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py (the class example): ``forward_backward`` and ``optim_step`` are
    submitted before either is waited for ("Submit the requests that follow before
    waiting"); the server runs them in submission order."""
    tc = new_trainer(seed=2)
    before = tc.forward([datum(backend, tokens)], "cross_entropy")  # all four submitted
    fb = tc.forward_backward([datum(backend, tokens)], "cross_entropy")  # before any wait
    opt = tc.optim_step(adam(backend))
    after = tc.forward([datum(backend, tokens)], "cross_entropy")
    first, trained, then = (
        float(wait(f, backend).metrics["loss:sum"]) for f in (before, fb, after)
    )
    wait(opt, backend)
    exact = backend.has("forward.bit_exact")
    assert close(trained, first, exact), "forward_backward ran after optim_step"
    assert then < first, "the forward queued after optim_step did not see the update"
    if backend.has("determinism"):
        # the same ops, each waited for before the next, give the same numbers
        ref = new_trainer(seed=2)
        assert loss_of(backend, ref, tokens) == first
        assert step(backend, ref, tokens) == trained
        assert loss_of(backend, ref, tokens) == then


def test_only_optim_step_changes_the_weights(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """index.mdx: ``forward_backward`` "compute and accumulate the gradients", ``optim_step``
    "update your model": the loss is unchanged by forward_backward and falls with steps."""
    tc = new_trainer(seed=3)
    exact = backend.has("forward.bit_exact")
    start = loss_of(backend, tc, tokens)
    assert start > 0.0, "a cross-entropy loss:sum (-sum w*logp, w = 1) is positive"
    wait(tc.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    assert close(loss_of(backend, tc, tokens), start, exact), "forward_backward moved weights"
    losses = [step(backend, tc, tokens) for _ in range(4)]
    assert loss_of(backend, tc, tokens) < 0.9 * start, (start, losses)


def test_a_zero_learning_rate_step_changes_nothing(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``optim_step``: "The Adam optimizer used by tinker is identical to
    torch.optim.AdamW", default ``weight_decay`` 0.0: at learning rate 0 no weight moves."""
    tc = new_trainer(seed=8)
    start = logprobs_of(backend, tc, tokens)
    wait(tc.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    wait(tc.optim_step(adam(backend, learning_rate=0.0)), backend)
    assert logprobs_of(backend, tc, tokens) == pytest.approx(start, abs=backend.limits.logprob_atol)


def test_optim_step_answers_an_optim_step_response(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``optim_step``: "Returns: APIFuture containing optimizer step
    response" (``OptimStepResponse``)."""
    tc = new_trainer(seed=9)
    wait(tc.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
    response = wait(tc.optim_step(adam(backend)), backend)
    assert isinstance(response, backend.ts.types.OptimStepResponse)


def test_a_larger_learning_rate_moves_further(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams.learning_rate``: "Learning rate for the optimizer": the same
    gradient stepped at a tenth of the rate moves the loss less."""
    small, large = new_trainer(seed=10), new_trainer(seed=10)
    start = loss_of(backend, small, tokens)
    lr = backend.limits.learning_rate
    for tc, rate in ((small, lr / 10), (large, lr)):
        wait(tc.forward_backward([datum(backend, tokens)], "cross_entropy"), backend)
        wait(tc.optim_step(adam(backend, learning_rate=rate)), backend)
    drop_small = start - loss_of(backend, small, tokens)
    drop_large = start - loss_of(backend, large, tokens)
    assert 0.0 < drop_small < drop_large, (drop_small, drop_large)


def test_two_trainers_train_independently(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """service_client.py ``create_lora_training_client``: each call creates its own model
    (``model_id``); stepping one leaves the other's weights as they were."""
    a, b = new_trainer(seed=12), new_trainer(seed=12)
    assert a.model_id != b.model_id
    before = logprobs_of(backend, b, tokens)
    for _ in range(2):
        step(backend, a, tokens)
    assert logprobs_of(backend, b, tokens) == pytest.approx(before, abs=backend.limits.logprob_atol)


@pytest.mark.requires("lora.zero_init")
def test_a_new_adapter_scores_like_the_base_model(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """localsession's decision (LoRA B starts at zero): a new adapter's logprobs are the
    base model's ``compute_logprobs``."""
    tc = new_trainer(seed=4)
    trained = logprobs_of(backend, tc, tokens)
    base = wait(tinker_client.create_sampling_client(base_model=backend.base_model), backend)
    scored = wait(base.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    assert scored[0] is None
    assert scored[1:] == pytest.approx(trained, abs=backend.limits.logprob_atol)


def test_sampler_weights_match_the_trainer(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``save_weights_for_sampler``: "Save model weights for use with a
    SamplingClient" then ``create_sampling_client(model_path=result.path)``: its
    ``compute_logprobs`` are the trainer's forward logprobs."""
    tc = new_trainer(seed=6)
    step(backend, tc, tokens)
    path = wait(tc.save_weights_for_sampler("conformance-sampler"), backend).path
    trained = logprobs_of(backend, tc, tokens)
    sampler = wait(tinker_client.create_sampling_client(model_path=path), backend)
    scored = wait(sampler.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    assert scored[1:] == pytest.approx(trained, abs=backend.limits.logprob_atol)


def test_save_weights_and_get_sampling_client_sees_the_step(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``save_weights_and_get_sampling_client``: "Save current weights
    and create a SamplingClient for inference": it scores the stepped weights, not the
    initial ones."""
    tc = new_trainer(seed=13)
    first = wait(tc.save_weights_and_get_sampling_client(), backend)
    for _ in range(2):
        step(backend, tc, tokens)
    trained = logprobs_of(backend, tc, tokens)
    second = wait(tc.save_weights_and_get_sampling_client(), backend)
    model_input = backend.ts.types.ModelInput.from_ints(tokens)
    old = wait(first.compute_logprobs(model_input), backend)[1:]
    new = wait(second.compute_logprobs(model_input), backend)[1:]
    assert new == pytest.approx(trained, abs=backend.limits.logprob_atol)
    assert sum(new) > sum(old), "the second sampler does not see the trained weights"
