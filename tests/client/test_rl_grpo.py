"""A GRPO smoke loop on the built-in tiny model, the shape of the seed blog's loop:
sample K completions per prompt, reward them, normalise advantages within each group, train
with ``ppo``, ``optim_step``, then refresh the sampler with the new weights.

Each step checks what RL silently depends on: the trainer reproduces the (refreshed)
sampler's logprobs, so the ratio is 1 and nothing clips before the update; a stale sampler
would not (checked once, so the test can fail); every metric is finite.
"""

from __future__ import annotations

import math
import statistics

import pytest

from localsession import AdamParams, Datum, ModelInput, SampledSequence, ServiceClient, TensorData

MODEL = "localsession/tiny"
K = 4
PROMPTS = [[257, *f"{a}+{b}=".encode()] for a, b in ((1, 2), (3, 4), (5, 1))]


def reward(seq: SampledSequence) -> float:
    """Fraction of completion bytes that are ASCII digits (something a policy can learn)."""
    return sum(48 <= t <= 57 for t in seq.tokens) / max(1, len(seq.tokens))


def grpo_datum(prompt: list[int], seq: SampledSequence, advantage: float) -> Datum:
    tokens = prompt + seq.tokens
    n, k = len(tokens) - 1, len(prompt) - 1
    assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=tokens[1:], dtype="int64"),
            "weights": TensorData(data=[0.0] * k + [1.0] * len(seq.tokens)),
            "logprobs": TensorData(data=[0.0] * k + list(seq.logprobs)),
            "advantages": TensorData(data=[advantage] * n),
        },
    )


def test_grpo_three_steps(relaxed: ServiceClient) -> None:
    with relaxed.create_lora_training_client(MODEL, rank=8, alpha=16) as tc:
        sampler = tc.save_weights_and_get_sampling_client()
        first_sampler = sampler
        params = {"max_tokens": 12, "temperature": 1.0}
        for step in range(3):
            futures = [
                sampler.sample(p, num_samples=K, sampling_params={**params, "seed": 10 * step + i})
                for i, p in enumerate(PROMPTS)
            ]
            datums = []
            for prompt, fut in zip(PROMPTS, futures, strict=True):
                seqs = fut.result(timeout=60).sequences
                assert len(seqs) == K
                rewards = [reward(s) for s in seqs]
                mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
                advantages = [(r - mean) / (std + 1e-6) for r in rewards]
                assert sum(advantages) == pytest.approx(0.0, abs=1e-6)
                datums += [grpo_datum(prompt, s, a) for s, a in zip(seqs, advantages, strict=True)]
            fb = tc.forward_backward(datums, "ppo").result(timeout=60)
            metrics = fb.metrics
            assert all(math.isfinite(v) for v in metrics.values())
            assert abs(metrics["actor/ppo_kl"]) < 1e-4, f"step {step}: sampler is stale"
            assert metrics["actor/pg_clipfrac"] == 0.0
            assert fb.loss_fn_outputs is not None and len(fb.loss_fn_outputs) == len(datums)
            opt = tc.optim_step(AdamParams(learning_rate=1e-2)).result(timeout=60)
            assert opt.metrics["grad_norm"] > 0
            sampler = tc.save_weights_and_get_sampling_client()
        # The weights moved: the first (base) sampler's logprobs no longer match the trainer's.
        seq = (
            first_sampler.sample(PROMPTS[0], sampling_params={**params, "seed": 1})
            .result(timeout=60)
            .sequences[0]
        )
        stale = tc.forward([grpo_datum(PROMPTS[0], seq, 1.0)], "ppo").result(timeout=60)
        assert abs(stale.metrics["actor/ppo_kl"]) > 1e-3
