"""The light fake engine (``FakeServiceClient()``, no torch) against closed forms.

Each expected value is computed here from the engine's logit rows (``engine.row(prev)``) with
the formulas of docs/semantics.md#1-#3, not read back from the engine's own loss code.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from fakes import FakeServiceClient
from localsession.types import AdamParams, Datum, ModelInput, SamplingParams

IDS = [257, 104, 105, 33]
TARGETS = IDS[1:] + [258]


@pytest.fixture
def fake() -> Iterator[FakeServiceClient]:
    with FakeServiceClient(strict=False) as client:
        yield client


def _log_softmax(row: list[float], j: int, temp: float = 1.0) -> float:
    scaled = [z / temp for z in row]
    top = max(scaled)
    return scaled[j] - (top + math.log(sum(math.exp(z - top) for z in scaled)))


def _datum(**inputs: Any) -> Datum:
    return Datum(
        model_input=ModelInput.from_ints(IDS),
        loss_fn_inputs={"target_tokens": TARGETS, "weights": [1.0, 0.5, 0.0, 2.0], **inputs},
    )


def test_cross_entropy_loss_logprobs_and_gradient(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    engine = fake.engine(tc)
    weights = [1.0, 0.5, 0.0, 2.0]
    out = tc.forward_backward([_datum()], "cross_entropy").result()
    lps = [_log_softmax(engine.row(p), t) for p, t in zip(IDS, TARGETS, strict=True)]
    assert out.loss_fn_outputs[0]["logprobs"]["data"] == pytest.approx(lps, rel=1e-6)
    expected = -sum(w * lp for w, lp in zip(weights, lps, strict=True))
    assert out.metrics["loss"] == pytest.approx(expected, rel=1e-6)
    assert out.metrics["global_token_num"] == 4.0
    # dℓ/dz_j = w · (softmax(z)_j − 1[j = target]), for the first position (prev = <bos>)
    row = engine.row(IDS[0])
    top = max(row)
    total = sum(math.exp(z - top) for z in row)
    grad = [math.exp(z - top) / total for z in row]
    grad[TARGETS[0]] -= 1.0
    assert engine.grad[IDS[0]] == pytest.approx(grad, rel=1e-6, abs=1e-12)
    assert IDS[2] not in engine.grad  # weight 0: no gradient


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
def test_rl_losses_match_the_closed_form(fake: FakeServiceClient, loss_fn: str) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    engine = fake.engine(tc)
    weights = [1.0, 0.5, 0.0, 2.0]
    lps = [_log_softmax(engine.row(p), t) for p, t in zip(IDS, TARGETS, strict=True)]
    q = [lp + d for lp, d in zip(lps, [0.5, -0.5, 0.0, 0.05], strict=True)]
    adv = [1.0, -1.0, 3.0, 2.0]
    out = tc.forward([_datum(logprobs=q, advantages=adv)], loss_fn).result()
    lo, hi = {"importance_sampling": (0, 10), "ppo": (0.8, 1.2), "cispo": (0.0, 4.0)}[loss_fn]
    expected = 0.0
    for w, lp, qq, a in zip(weights, lps, q, adv, strict=True):
        r = math.exp(lp - qq)
        if loss_fn == "importance_sampling":
            expected += -w * r * a
        elif loss_fn == "ppo":
            expected += -w * min(r * a, min(max(r, lo), hi) * a)
        else:
            expected += -w * min(max(r, lo), hi) * a * lp
    assert out.metrics["loss"] == pytest.approx(expected, rel=1e-6)
    kl = sum(w * (qq - lp) for w, qq, lp in zip(weights, q, lps, strict=True)) / sum(weights)
    assert out.metrics["actor/ppo_kl"] == pytest.approx(kl, rel=1e-6)


def test_first_adamw_step_is_lr_times_sign(fake: FakeServiceClient) -> None:
    """From zero moments, bias-corrected AdamW moves each entry by lr·g/(|g| + eps)."""
    tc = fake.create_lora_training_client("m", rank=4)
    engine = fake.engine(tc)
    tc.forward_backward([_datum()], "cross_entropy").result()
    grad = list(engine.grad[IDS[0]])
    lr, eps = 1e-3, 1e-8
    metrics = tc.optim_step(AdamParams(learning_rate=lr, eps=eps)).result().metrics
    norm = math.sqrt(sum(x * x for g in [grad] for x in g))
    assert metrics["grad_norm"] >= norm  # other rows add to the global norm
    expected = [-lr * g / (abs(g) + eps) for g in grad]
    assert engine.delta[IDS[0]] == pytest.approx(expected, rel=1e-6, abs=1e-15)
    assert engine.grad == {}


def test_training_lowers_the_loss_and_zero_lr_changes_nothing(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    first = tc.forward_backward([_datum()], "cross_entropy").result().metrics["loss"]
    for _ in range(5):
        tc.optim_step(AdamParams(learning_rate=1e-2)).result()
        tc.forward_backward([_datum()], "cross_entropy").result()
    later = tc.forward([_datum()], "cross_entropy").result().metrics["loss"]
    assert later < first
    engine = fake.engine(tc)
    before = {k: list(v) for k, v in engine.delta.items()}
    tc.optim_step(AdamParams(learning_rate=0.0)).result()
    assert engine.delta == before


def test_bad_inputs_fail_the_op_and_leave_no_gradient(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    bad = Datum(
        model_input=ModelInput.from_ints(IDS),
        loss_fn_inputs={"target_tokens": [104, 105, 33, 999], "weights": [1.0] * 4},
    )
    with pytest.raises(Exception, match="token id 999, outside the vocabulary"):
        tc.forward_backward([_datum(), bad], "cross_entropy").result()
    assert fake.engine(tc).grad == {}


def test_sampling_greedy_scripted_seeded_and_snapshots(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    engine = fake.engine(tc)
    sampler = tc.create_sampling_client()
    prompt = ModelInput.from_ints([257, 104])
    greedy = sampler.sample(
        prompt, sampling_params=SamplingParams(max_tokens=3, temperature=0.0)
    ).result()
    tokens = greedy.sequences[0].tokens
    prev = 104
    for token in tokens:
        row = engine.row(prev)
        assert token == max(range(len(row)), key=lambda j: row[j])
        prev = token
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=7)
    a = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    b = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    fake.script.on_prompt("h", "ok")
    scripted = sampler.sample(prompt, sampling_params=params).result()
    assert bytes(scripted.sequences[0].tokens[:2]) == b"ok"
    # a saved snapshot keeps sampling what was saved, whatever training does next
    snap = tc.save_weights_and_get_sampling_client()
    before = snap.compute_logprobs(ModelInput.from_ints(IDS)).result()
    tc.forward_backward([_datum()], "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=1e-2)).result()
    assert snap.compute_logprobs(ModelInput.from_ints(IDS)).result() == before


def test_state_round_trip_restores_weights_and_moments(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("m", rank=4)
    tc.forward_backward([_datum()], "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=1e-2)).result()
    saved = tc.save_state().result()
    engine = fake.engine(tc)
    delta = {k: list(v) for k, v in engine.delta.items()}
    moments = {k: list(v) for k, v in engine.exp_avg.items()}
    tc.forward_backward([_datum()], "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=1e-2)).result()
    assert saved.model_package_arn
    tc.load_state_with_optimizer(saved.model_package_arn).result()
    assert engine.delta == delta and engine.exp_avg == moments and engine.adam_step == 1
