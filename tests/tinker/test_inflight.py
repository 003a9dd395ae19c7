"""``kind="inflight"`` sampling clients through the unmodified ``tinker`` SDK: every inflight
client of a model reads one shared target that each inflight save updates, so a client
samples the weights saved when it was made or newer (the SDK's contract), while a snapshot
client keeps its weights. Compared against the trainer's own ``forward`` at each step."""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

TOKENS = [257, 72, 101, 108, 108, 111, 33, 258]


def test_inflight_clients_follow_the_newest_inflight_save(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=1).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
    )

    def step() -> list[float]:
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        return tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()

    def scored(sampler: Any) -> list[float]:
        return sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1:]

    w1 = step()
    sampler_a = tc.save_weights_and_get_sampling_client(kind="inflight").result()
    snapshot = tc.save_weights_and_get_sampling_client().result()
    assert scored(sampler_a) == pytest.approx(w1, abs=1e-4)
    w2 = step()
    assert max(abs(a - b) for a, b in zip(w1, w2, strict=True)) > 1e-2  # the step moved them
    assert scored(sampler_a) == pytest.approx(w1, abs=1e-4)  # nothing published yet
    sampler_b = tc.save_weights_and_get_sampling_client(kind="inflight").result()
    assert scored(sampler_b) == pytest.approx(w2, abs=1e-4)
    assert scored(sampler_a) == pytest.approx(w2, abs=1e-4)  # the shared target moved on
    assert scored(snapshot) == pytest.approx(w1, abs=1e-4)  # a snapshot stays
    params = types.SamplingParams(max_tokens=4, temperature=0.0)
    prompt = types.ModelInput.from_ints(TOKENS[:3])
    a = sampler_a.sample(prompt, 1, params).result().sequences[0].tokens
    b = sampler_b.sample(prompt, 1, params).result().sequences[0].tokens
    assert a == b
    sc.close("success").result()
