"""The fake engine's losses and optimizer are the documented math (docs/semantics.md#1, #2).

Each loss is checked against its closed form, evaluated here in plain Python (float64) from
the fake model's own logit table: lp = table[prev][target] - logsumexp(table[prev]).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from fakes import FakeServiceClient
from localsession.types import AdamParams, Datum, ModelInput

TOKENS = [257, 72, 105, 33, 10, 72]
TARGETS = TOKENS[1:] + [258]
WEIGHTS = [0.0, 1.0, 1.0, 0.5, 2.0, 1.0]
ADVANTAGES = [0.0, 1.0, -1.0, 2.0, -0.5, 1.5]
#: Importance ratios r = exp(lp - q) to script, covering both sides of every clip bound.
RATIOS = [1.0, 0.5, 0.7, 1.1, 1.5, 5.0]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServiceClient]:
    with FakeServiceClient(numerics=True) as client:
        yield client


def closed_form_lp(table: list[list[float]], prev: int, target: int) -> float:
    row = table[prev]
    peak = max(row)
    return row[target] - (peak + math.log(sum(math.exp(x - peak) for x in row)))


def clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def closed_form_loss(loss_fn: str, lp: float, q: float, a: float, w: float) -> float:
    r = math.exp(lp - q)
    if loss_fn == "cross_entropy":
        return -w * lp
    if loss_fn == "importance_sampling":
        return -w * r * a
    if loss_fn == "ppo":
        return -w * min(r * a, clip(r, 0.8, 1.2) * a)
    assert loss_fn == "cispo"
    return -w * clip(r, 0.0, 4.0) * a * lp


def datum(**inputs: list[float]) -> Datum:
    return Datum(
        model_input=ModelInput.from_ints(TOKENS),
        loss_fn_inputs={"target_tokens": TARGETS, "weights": WEIGHTS, **inputs},
    )


def trained_client(fake: FakeServiceClient) -> Any:
    """A training client whose adapter has taken one step (so B is no longer zero)."""
    tc = fake.create_lora_training_client("fakes/bigram", rank=4)
    tc.forward_backward([datum()], "cross_entropy").result()
    tc.optim_step(AdamParams(learning_rate=1e-2)).result()
    return tc


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo", "cispo"])
def test_loss_matches_the_closed_form(fake: FakeServiceClient, loss_fn: str) -> None:
    tc = trained_client(fake)
    table = fake.engine(tc).table().double().tolist()
    base = fake.engine(tc).model.base_table().double().tolist()
    lp = [closed_form_lp(table, p, t) for p, t in zip(TOKENS, TARGETS, strict=True)]
    assert lp != [
        closed_form_lp(base, p, t) for p, t in zip(TOKENS, TARGETS, strict=True)
    ]  # adapter on
    q = [x - math.log(r) for x, r in zip(lp, RATIOS, strict=True)]
    inputs = {} if loss_fn == "cross_entropy" else {"logprobs": q, "advantages": ADVANTAGES}
    out = tc.forward_backward([datum(**inputs)], loss_fn).result()

    expected = [
        closed_form_loss(loss_fn, *args) for args in zip(lp, q, ADVANTAGES, WEIGHTS, strict=True)
    ]
    reported = out.loss_fn_outputs[0]
    assert reported["logprobs"]["data"] == pytest.approx(lp, abs=1e-4)
    assert reported["elementwise_loss"]["data"] == pytest.approx(expected, abs=1e-4)
    assert out.metrics["loss"] == pytest.approx(sum(expected), abs=1e-3)
    assert out.metrics["global_token_num"] == len(TOKENS)
    if loss_fn != "cross_entropy":
        kl = sum(w * (qi - li) for w, qi, li in zip(WEIGHTS, q, lp, strict=True)) / sum(WEIGHTS)
        assert out.metrics["actor/ppo_kl"] == pytest.approx(kl, abs=1e-4)
    tc.stop()


def test_ppo_clip_config_is_applied(fake: FakeServiceClient) -> None:
    tc = trained_client(fake)
    table = fake.engine(tc).table().double().tolist()
    lp = [closed_form_lp(table, p, t) for p, t in zip(TOKENS, TARGETS, strict=True)]
    q = [x - math.log(r) for x, r in zip(lp, RATIOS, strict=True)]
    config = {"clip_low_threshold": 0.6, "clip_high_threshold": 2.0}
    out = tc.forward_backward(
        [datum(logprobs=q, advantages=ADVANTAGES)], "ppo", loss_fn_config=config
    ).result()
    expected = sum(
        -w * min(math.exp(li - qi) * a, clip(math.exp(li - qi), 0.6, 2.0) * a)
        for li, qi, a, w in zip(lp, q, ADVANTAGES, WEIGHTS, strict=True)
    )
    assert out.metrics["loss"] == pytest.approx(expected, abs=1e-3)
    tc.stop()


def test_optim_step_descends_and_zero_lr_changes_nothing(fake: FakeServiceClient) -> None:
    relaxed = FakeServiceClient(service=fake.service, strict=False)  # lr = 0 is below the limit
    tc = relaxed.create_lora_training_client("fakes/bigram", rank=4)
    before = tc.forward_backward([datum()], "cross_entropy").result().metrics["loss"]
    step = tc.optim_step(AdamParams(learning_rate=1e-2)).result().metrics
    assert step["grad_norm"] > 0 and step["learning_rate"] == 1e-2
    after = tc.forward([datum()], "cross_entropy").result().metrics["loss"]
    assert after < before

    table = fake.engine(tc).table()
    tc.forward_backward([datum()], "cross_entropy").result()
    frozen = tc.optim_step(AdamParams(learning_rate=0.0)).result().metrics
    assert frozen["grad_norm"] > 0
    assert bool((fake.engine(tc).table() == table).all())
    tc.stop()
