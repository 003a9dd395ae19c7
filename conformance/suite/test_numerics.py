"""Numerical agreement: forward ≡ forward_backward, split invariance, sampler vs trainer
logprobs and the temperature relation (docs/semantics.md#1, #3)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import (
    TEXT_A,
    TEXT_B,
    TEXT_C,
    adam,
    logprobs,
    max_abs,
    mse,
    params,
    result,
    scoring_datum,
    sft,
)


@pytest.mark.requires("loss.outputs")
def test_forward_matches_forward_backward(backend: Backend, ts: Any, training_client: Any) -> None:
    batch = [sft(ts, TEXT_A), sft(ts, TEXT_B)]
    fwd = result(training_client.forward(batch, "cross_entropy"), backend)
    fb = result(training_client.forward_backward(batch, "cross_entropy"), backend)
    for a, b in zip(logprobs(fwd), logprobs(fb), strict=True):
        assert a == pytest.approx(b, abs=backend.limits.logprob_atol)
    assert fwd.metrics["loss"] == pytest.approx(fb.metrics["loss"], rel=1e-5)


@pytest.mark.requires("loss.outputs", "forward.bit_exact")
def test_forward_is_bit_exact_with_forward_backward(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    batch = [sft(ts, TEXT_A), sft(ts, TEXT_C)]
    fwd = result(training_client.forward(batch, "cross_entropy"), backend)
    fb = result(training_client.forward_backward(batch, "cross_entropy"), backend)
    assert logprobs(fwd) == logprobs(fb)


@pytest.mark.requires("loss.sum_reduction")
def test_loss_is_invariant_to_splitting_the_batch(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    a, b, c = sft(ts, TEXT_A), sft(ts, TEXT_B), sft(ts, TEXT_C)
    whole = result(training_client.forward([a, b, c], "cross_entropy"), backend)
    parts = [result(training_client.forward(p, "cross_entropy"), backend) for p in ([a], [b, c])]
    # loss is a per-datum mean: the datum-weighted mean of the parts' (the SDK's own fold)
    folded = (parts[0].metrics["loss"] + 2 * parts[1].metrics["loss"]) / 3
    assert whole.metrics["loss"] == pytest.approx(folded, rel=1e-5)
    tokens = sum(p.metrics["global_token_num"] for p in parts)
    assert whole.metrics["global_token_num"] == tokens


@pytest.mark.requires("loss.sum_reduction", "optim.metrics")
def test_gradient_accumulation_is_invariant_to_splitting(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """One forward_backward on [a, b, c], or two on [a] and [b, c] before one optim_step,
    accumulate the same gradient: the same grad_norm, and the same weights afterwards."""
    a, b, c = sft(ts, TEXT_A), sft(ts, TEXT_B), sft(ts, TEXT_C)
    start = result(training_client.save_state(), backend).model_package_arn

    def step(split: bool) -> tuple[float, list[float]]:
        result(training_client.load_state(start), backend)  # fresh optimizer, no gradient
        for part in ([a], [b, c]) if split else ([a, b, c],):
            training_client.forward_backward(part, "cross_entropy")
        grad_norm = result(training_client.optim_step(adam(ts, backend)), backend).metrics[
            "grad_norm"
        ]
        after = result(training_client.forward([a], "cross_entropy"), backend)
        return grad_norm, logprobs(after)[0]

    norm_whole, lp_whole = step(False)
    norm_split, lp_split = step(True)
    assert norm_whole > 0
    assert norm_split == pytest.approx(norm_whole, rel=1e-4)
    assert max_abs(lp_split, lp_whole) < 1e-3


@pytest.mark.requires("optim.metrics")
def test_optim_step_metrics(backend: Backend, ts: Any, training_client: Any) -> None:
    training_client.forward_backward([sft(ts, TEXT_A)], "cross_entropy")
    metrics = result(training_client.optim_step(adam(ts, backend)), backend).metrics
    assert metrics["learning_rate"] == pytest.approx(backend.limits.learning_rate)
    assert metrics["grad_norm"] > 0 and metrics["num_params_updated"] > 0


@pytest.mark.requires("loss.outputs")
def test_sampler_and_trainer_logprobs_agree(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """Tokens sampled at T = 1 from saved weights, scored by ``forward`` on the same
    weights: per-token logprobs agree within the backend's MSE bound."""
    result(training_client.forward_backward([sft(ts, TEXT_A)], "cross_entropy"), backend)
    result(training_client.optim_step(adam(ts, backend)), backend)
    sampler = training_client.save_weights_and_get_sampling_client()
    prompt = list(backend.prompt)
    out = result(
        sampler.sample(
            ts.ModelInput.from_ints(prompt), 3, params(backend, ts, 8, temperature=1.0, seed=5)
        ),
        backend,
    )
    checked = 0
    for seq in out.sequences:
        if not seq.tokens:
            continue
        k = len(seq.tokens)
        scored = scoring_datum(ts, prompt, list(seq.tokens))
        lp = logprobs(result(training_client.forward([scored], "importance_sampling"), backend))
        trainer = lp[0][len(prompt) - 1 :]
        assert len(trainer) == k
        assert mse(trainer, list(seq.logprobs)) < backend.limits.logprob_mse
        checked += 1
    assert checked > 0


@pytest.mark.requires("loss.outputs", "loss.temperature_input", "sampling.tempered_logprobs")
@pytest.mark.parametrize("temperature", [0.5, 1.7])
def test_temperature_relation(
    backend: Backend, ts: Any, training_client: Any, temperature: float
) -> None:
    """The sampler's logprobs at temperature T equal the trainer's logprobs with the
    per-token ``temperature`` input T, so the importance ratio starts at exactly 1."""
    sampler = training_client.save_weights_and_get_sampling_client()
    prompt = list(backend.prompt)
    out = result(
        sampler.sample(
            ts.ModelInput.from_ints(prompt),
            2,
            params(backend, ts, 6, temperature=temperature, seed=9),
        ),
        backend,
    )
    for seq in out.sequences:
        n = len(prompt) + len(seq.tokens) - 1
        datum = scoring_datum(
            ts,
            prompt,
            list(seq.tokens),
            logprobs=[0.0] * (len(prompt) - 1) + list(seq.logprobs),
            advantages=[1.0] * n,
            weights=[0.0] * (len(prompt) - 1) + [1.0] * len(seq.tokens),
            temperature=[temperature] * n,
        )
        lp = logprobs(result(training_client.forward([datum], "importance_sampling"), backend))
        assert mse(lp[0][len(prompt) - 1 :], list(seq.logprobs)) < backend.limits.logprob_mse


@pytest.mark.requires("lora.zero_init", "loss.outputs")
def test_new_session_scores_like_the_base_model(
    backend: Backend, ts: Any, training_client: Any, service_client: Any
) -> None:
    """LoRA B starts at zero: a fresh session's forward logprobs equal the base model's
    prompt logprobs (compute_logprobs without any package)."""
    sampler = training_client.create_sampling_client()
    base = result(sampler.compute_logprobs(list(TEXT_A)), backend)
    lp = logprobs(result(training_client.forward([sft(ts, TEXT_A)], "cross_entropy"), backend))[0]
    assert max_abs(lp[:-1], [float(x) for x in base[1:]]) < backend.limits.logprob_atol


@pytest.mark.requires("lora.seeded_init", "loss.outputs")
def test_equal_sessions_start_and_train_bit_identical(
    backend: Backend, ts: Any, new_training_client: Any
) -> None:
    def run() -> list[list[float]]:
        tc = new_training_client()
        tc.forward_backward([sft(ts, TEXT_A)], "cross_entropy")
        tc.optim_step(adam(ts, backend))
        return logprobs(result(tc.forward([sft(ts, TEXT_B)], "cross_entropy"), backend))

    assert run() == run()
