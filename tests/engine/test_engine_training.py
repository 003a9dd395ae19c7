"""TorchEngine training ops: forward/backward semantics, validation, accumulation, seeding."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localsession.engine import create_engine
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, EngineInputError, EngineSpec, TrainingDatum
from localsession.runtime.sagemaker_wire import result_body

from .conftest import OPTIONS
from .helpers import make_datum, outputs_without, random_tokens, untimed

ADAM = AdamHyperparams(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)


def grads(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}


def test_create_engine_returns_torch_engine() -> None:
    engine = create_engine(EngineSpec("localsession/tiny", rank=2, alpha=4, options=OPTIONS))
    try:
        assert isinstance(engine, TorchEngine)
        assert engine.get_tokenizer().encode("a") == [257, 97]
    finally:
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.optim_step(ADAM)


def test_forward_matches_forward_backward_bit_for_bit(
    make_engine: Callable[..., TorchEngine],
) -> None:
    engine = make_engine()
    datums = [make_datum(t) for t in random_tokens(4, 30, seed=1)]
    fwd = engine.forward(datums, "cross_entropy", None)
    assert not engine.optimizer.has_grad()  # forward adds no gradient
    fb = engine.forward_backward(datums, "cross_entropy", None, backward=True)
    assert engine.optimizer.has_grad()
    # the same but for the accumulated gradient's norm (none before, this pass's after)
    assert fwd.metrics["actor/grad_norm"] == 0.0
    assert outputs_without(fwd.outputs, "actor/grad_norm") == outputs_without(
        fb.outputs, "actor/grad_norm"
    )
    assert untimed(fwd.metrics, "actor/grad_norm") == untimed(fb.metrics, "actor/grad_norm")
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads(engine).values()]))
    assert fb.metrics["actor/grad_norm"] == pytest.approx(float(norm), rel=1e-6)
    assert all(o.extra["actor/grad_norm"] == fb.metrics["actor/grad_norm"] for o in fb.outputs)


def test_outputs_shape_and_dtype(tiny_engine: TorchEngine) -> None:
    token_lists = random_tokens(3, 20, seed=2)
    out = tiny_engine.forward([make_datum(t) for t in token_lists], "cross_entropy", None)
    assert len(out.outputs) == 3
    wire = result_body(out)["lossFnOutputs"]  # the SageMaker wire's TensorData
    for tokens, item, sent in zip(token_lists, out.outputs, wire, strict=True):
        for key in ("logprobs", "elementwise_loss"):
            assert sent[key]["dtype"] == "float32"
            assert sent[key]["shape"] == [len(tokens)] == [len(sent[key]["data"])]
            assert sent[key]["data"] == getattr(item, key)
        # cross_entropy with weights 1: elementwise loss is -lp
        assert item.elementwise_loss == [-v for v in item.logprobs]
    assert out.metrics["global_token_num"] == sum(len(t) for t in token_lists)
    total = sum(sum(i.elementwise_loss) for i in out.outputs)
    assert out.metrics["loss"] == pytest.approx(total / 3, rel=1e-5)  # a per-datum mean


def test_split_invariance(make_engine: Callable[..., TorchEngine]) -> None:
    whole, split = make_engine(seed=4), make_engine(seed=4)
    datums = [make_datum(t) for t in random_tokens(8, 48, seed=3)]
    r_all = whole.forward_backward(datums, "cross_entropy", None, backward=True)
    r_a = split.forward_backward(datums[:4], "cross_entropy", None, backward=True)
    r_b = split.forward_backward(datums[4:], "cross_entropy", None, backward=True)
    # per-datum means: the halves' mean is the whole's (the gradients add, below)
    assert r_all.metrics["loss"] == pytest.approx(
        (r_a.metrics["loss"] + r_b.metrics["loss"]) / 2, rel=1e-6
    )
    whole.optim_step(ADAM)
    split.optim_step(ADAM)
    a, b = whole.adapter_state_dict(), split.adapter_state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)
    assert any(
        not torch.equal(v, make_engine(seed=4).adapter_state_dict()[k]) for k, v in a.items()
    )  # the step did move the weights


def test_gradients_accumulate_until_optim_step(make_engine: Callable[..., TorchEngine]) -> None:
    once, twice = make_engine(), make_engine()
    datums = [make_datum(t) for t in random_tokens(2, 16, seed=5)]
    once.forward_backward(datums, "cross_entropy", None, backward=True)
    twice.forward_backward(datums, "cross_entropy", None, backward=True)
    twice.forward_backward(datums, "cross_entropy", None, backward=True)
    g1, g2 = grads(once), grads(twice)
    assert g1.keys() == g2.keys() and g1
    for name in g1:
        torch.testing.assert_close(g2[name], 2 * g1[name], atol=1e-6, rtol=1e-5)
    twice.optim_step(ADAM)
    assert not twice.optimizer.has_grad()


def test_failing_op_adds_no_gradient(make_engine: Callable[..., TorchEngine]) -> None:
    engine = make_engine()
    token_lists = random_tokens(4, 18, seed=6, vary=False)
    good = [make_datum(t, logprobs=[-1.0] * 18, advantages=[1.0] * 18) for t in token_lists]
    engine.forward_backward(good, "ppo", None, backward=True)
    before = grads(engine)
    bad = list(good)
    bad[3] = make_datum(token_lists[3], logprobs=[-1.0] * 18, advantages=[1.0] * 17)
    with pytest.raises(EngineInputError) as err:
        engine.forward_backward(bad, "ppo", None, backward=True)
    assert "datum 3: `advantages` has 17 values, its model_input has 18 tokens" in str(err.value)
    after = grads(engine)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[n], after[n]) for n in before)

    fresh = make_engine()
    with pytest.raises(EngineInputError):
        fresh.forward_backward(bad, "ppo", None, backward=True)
    assert not fresh.optimizer.has_grad()


def _single(tokens: list[int], **inputs: Any) -> list[TrainingDatum]:
    return [make_datum(tokens), make_datum(tokens, **inputs)]


@pytest.mark.parametrize(
    ("datums_fn", "loss_fn", "needles"),
    [
        (
            lambda t: _single(t, old_logprobs=[0.0] * len(t)),
            "cross_entropy",
            ["datum 1", "old_logprobs", "target_tokens", "ref_log_prob"],
        ),
        (lambda t: [make_datum(t)], "ppo", ["datum 0", "`logprobs` is missing"]),
        (
            lambda t: [TrainingDatum(t, {"weights": [1.0] * len(t)})],
            "cross_entropy",
            ["datum 0", "target_tokens"],
        ),
        (
            lambda t: [make_datum(t), make_datum([*t[:-1], 259])],
            "cross_entropy",
            ["datum 1", "259", "vocabulary"],
        ),
        (
            lambda t: _single(t, target_tokens=[-1] * len(t)),
            "cross_entropy",
            ["datum 1", "target_tokens", "-1"],
        ),
        (
            lambda t: _single(t, weights=[1.0] * (len(t) + 1)),
            "cross_entropy",
            ["datum 1", "`weights` has"],
        ),
        (lambda t: _single(t, weights=["x"] * len(t)), "cross_entropy", ["datum 1", "weights"]),
        (
            lambda t: _single(t, weights=[float("nan")] * len(t)),
            "cross_entropy",
            ["datum 1", "non-finite"],
        ),
        (
            lambda t: _single(t, temperature=[0.0] * len(t)),
            "cross_entropy",
            ["datum 1", "temperature"],
        ),
        (
            lambda t: _single(t, target_tokens=[1.5] * len(t)),
            "cross_entropy",
            ["datum 1", "target_tokens"],
        ),
        (
            lambda t: [make_datum(t), TrainingDatum([], {})],
            "cross_entropy",
            ["datum 1", "no tokens"],
        ),
        (lambda t: [make_datum(t)], "dpo", ["dpo", "cross_entropy"]),
    ],
)
def test_input_errors_name_datum_and_key(
    tiny_engine: TorchEngine,
    datums_fn: Callable[[list[int]], list[TrainingDatum]],
    loss_fn: str,
    needles: list[str],
) -> None:
    with pytest.raises(EngineInputError) as err:
        tiny_engine.forward(datums_fn(list(range(40, 52))), loss_fn, None)
    for needle in needles:
        assert needle in str(err.value)


def test_json_booleans_are_zero_one(tiny_engine: TorchEngine) -> None:
    tokens = list(range(60, 72))
    mask = [i % 2 == 0 for i in range(len(tokens))]
    as_bool = tiny_engine.forward([make_datum(tokens, weights=mask)], "cross_entropy", None)
    as_float = tiny_engine.forward(
        [make_datum(tokens, weights=[float(m) for m in mask])], "cross_entropy", None
    )
    assert as_bool.outputs == as_float.outputs
    assert untimed(as_bool.metrics) == untimed(as_float.metrics)


def test_rl_metrics_at_ratio_one(tiny_engine: TorchEngine) -> None:
    token_lists = random_tokens(2, 20, seed=8)
    base = tiny_engine.forward([make_datum(t) for t in token_lists], "cross_entropy", None)
    datums = [
        make_datum(
            t,
            logprobs=o.logprobs,
            advantages=[0.5] * len(t),
            ref_log_prob=[v - 0.25 for v in o.logprobs],
        )
        for t, o in zip(token_lists, base.outputs, strict=True)
    ]
    for loss_fn in ("importance_sampling", "ppo", "cispo"):
        metrics = tiny_engine.forward(datums, loss_fn, None).metrics
        assert metrics["actor/pg_clipfrac"] == 0.0
        assert abs(metrics["actor/ppo_kl"]) < 1e-6
        assert metrics["actor/kl_ref"] == pytest.approx(0.25, abs=1e-5)
        assert all(math.isfinite(v) for v in metrics.values())
    n = sum(len(t) for t in token_lists)
    is_loss = tiny_engine.forward(datums, "importance_sampling", None).metrics["loss"]
    assert is_loss == pytest.approx(-0.5 * n / 2, rel=1e-5)  # mean over 2 datums of Σ -w·r·A


def test_lora_init_is_seeded(make_engine: Callable[..., TorchEngine]) -> None:
    a, b, c = make_engine(seed=9), make_engine(seed=9), make_engine(seed=10)
    sa, sb, sc = a.adapter_state_dict(), b.adapter_state_dict(), c.adapter_state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    lora_a = [k for k in sa if ".lora_A." in k]
    lora_b = [k for k in sa if ".lora_B." in k]
    assert len(lora_a) == len(lora_b) == 14  # 7 projections x 2 layers
    assert all(not torch.equal(sa[k], sc[k]) for k in lora_a)
    assert all(torch.count_nonzero(sa[k]) == 0 for k in lora_b)
    names = {k.split(".")[-4] for k in sa}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_zero_lr_and_empty_step_keep_weights(make_engine: Callable[..., TorchEngine]) -> None:
    engine = make_engine()
    before = engine.adapter_state_dict()
    empty = engine.optim_step(ADAM)
    assert empty.metrics["num_params_updated"] == 0 and empty.metrics["grad_norm"] == 0
    engine.forward_backward([make_datum(list(range(1, 30)))], "cross_entropy", None, backward=True)
    metrics = engine.optim_step(replace(ADAM, learning_rate=0.0)).metrics
    assert metrics["grad_norm"] > 0 and metrics["learning_rate"] == 0.0
    after = engine.adapter_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not engine.optimizer.has_grad()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    length=st.integers(1, 12),
    key=st.sampled_from(
        ["target_tokens", "weights", "advantages", "logprobs", "temperature", "ref_log_prob"]
    ),
    delta=st.integers(-3, 3).filter(lambda d: d != 0),
    index=st.integers(0, 2),
)
def test_any_length_mismatch_is_rejected(
    tiny_engine: TorchEngine, length: int, key: str, delta: int, index: int
) -> None:
    tokens = list(range(100, 100 + length))
    good = {"logprobs": [-1.0] * length, "advantages": [1.0] * length}
    datums = [make_datum(tokens, **good) for _ in range(3)]
    bad_len = max(0, length + delta)
    fill: Any = 1 if key == "target_tokens" else 0.5
    datums[index] = make_datum(tokens, **{**good, key: [fill] * bad_len})
    with pytest.raises(EngineInputError) as err:
        tiny_engine.forward(datums, "ppo", None)
    message = str(err.value)
    assert f"datum {index}: `{key}` has {bad_len} values" in message
    assert f"{length} tokens" in message
