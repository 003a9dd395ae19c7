"""TorchEngine with the RL losses: split invariance, forward ≡ forward_backward, the
``temperature`` input against a direct computation, and batch invariance of sampling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from localsession.engine.torch_engine import TorchEngine
from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    LossConfig,
    SampleRequest,
    TrainingDatum,
)

from .helpers import (
    make_datum,
    output_keys,
    output_row,
    outputs_without,
    random_tokens,
    untimed,
)

RL_LOSSES = ("importance_sampling", "ppo", "cispo")
CONFIG = LossConfig(clip_low_threshold=0.9, clip_high_threshold=1.1)


def rl_datums(seed: int, n: int = 8, length: int = 24) -> list[TrainingDatum]:
    """Datums whose `logprobs` are scattered around a plausible value (ratios ~0.5–2)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for tokens in random_tokens(n, length, seed=seed):
        k = len(tokens)
        out.append(
            make_datum(
                tokens,
                logprobs=(-5.6 + 1.4 * (torch.rand(k, generator=gen) - 0.5)).tolist(),
                advantages=torch.randn(k, generator=gen).tolist(),
                weights=[0.0] * 3 + torch.rand(k - 3, generator=gen).tolist(),
                temperature=(0.5 + torch.rand(k, generator=gen)).tolist(),
            )
        )
    return out


def grads(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_fn", RL_LOSSES)
def test_split_invariance(make_engine: Callable[..., TorchEngine], loss_fn: str) -> None:
    """One call over 8 datums ≡ two calls over 4 + 4: gradients add, and the reported
    loss (a per-datum mean) is the mean of the halves'."""
    whole, split = make_engine(seed=3), make_engine(seed=3)
    for engine in (whole, split):  # one identical step so LoRA B is non-zero
        engine.forward_backward(rl_datums(50), "cross_entropy", None, backward=True)
        engine.optim_step(AdamHyperparams(learning_rate=1e-2))
    datums = rl_datums(seed=7)
    r_all = whole.forward_backward(datums, loss_fn, CONFIG, backward=True)
    r_a = split.forward_backward(datums[:4], loss_fn, CONFIG, backward=True)
    r_b = split.forward_backward(datums[4:], loss_fn, CONFIG, backward=True)
    for key in ("loss", "actor/pg_loss"):
        assert r_all.metrics[key] == pytest.approx(
            (r_a.metrics[key] + r_b.metrics[key]) / 2, rel=1e-5, abs=1e-6
        ), key
    assert r_all.metrics["actor/pg_loss"] == r_all.metrics["loss"]
    per_datum = [o.extra["actor/pg_loss"] for o in r_all.outputs]
    sums = [sum(o.elementwise_loss) for o in r_all.outputs]
    assert per_datum == pytest.approx(sums, rel=1e-5, abs=1e-6)
    assert r_b.metrics["actor/grad_norm"] == pytest.approx(
        r_all.metrics["actor/grad_norm"], rel=1e-5
    )  # the norm of the gradient accumulated over both halves
    for key in ("logprobs", "elementwise_loss"):
        joined = [output_row(o, key) for o in r_a.outputs + r_b.outputs]
        for row_all, row_split in zip(
            [output_row(o, key) for o in r_all.outputs], joined, strict=True
        ):
            # a few float32 ulps: the batch size changes the matmul's summation order
            assert row_all == pytest.approx(row_split, rel=1e-6, abs=1e-6)
    assert 0 < r_all.metrics["actor/pg_clipfrac"] < 1 or loss_fn == "importance_sampling"
    g_all, g_split = grads(whole), grads(split)
    assert g_all.keys() == g_split.keys() and g_all
    for name in g_all:
        torch.testing.assert_close(g_all[name], g_split[name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("loss_fn", RL_LOSSES)
def test_forward_and_forward_backward_bit_identical(
    make_engine: Callable[..., TorchEngine], loss_fn: str
) -> None:
    engine = make_engine()
    datums = rl_datums(seed=11, n=3)
    fwd = engine.forward(datums, loss_fn, CONFIG)
    fb = engine.forward_backward(datums, loss_fn, CONFIG, backward=True)
    # exact float equality, but for the accumulated gradient's norm
    assert outputs_without(fwd.outputs, "actor/grad_norm") == outputs_without(
        fb.outputs, "actor/grad_norm"
    )
    assert untimed(fwd.metrics, "actor/grad_norm") == untimed(fb.metrics, "actor/grad_norm")
    assert set(fwd.metrics) == {
        "loss",
        "global_token_num",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_loss",
        "actor/grad_norm",
        "estimated_flops",
        "promised_flops",
        "mfu",
    }
    assert set(fb.metrics) == set(fwd.metrics)
    assert fb.metrics["estimated_flops"] == 3 * fwd.metrics["estimated_flops"]
    assert output_keys(fb.outputs[0]) == {
        "logprobs",
        "elementwise_loss",
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/grad_norm",
    }


def test_temperature_input_matches_direct_computation(
    tiny_engine: TorchEngine, tiny_base: tuple[Any, Any]
) -> None:
    """lp[t] = log_softmax(logits[t] / T[t])[target[t]] on the base model (B = 0)."""
    base, _ = tiny_base
    tokens = random_tokens(1, 30, seed=4)[0]
    temps = [0.3 + 0.1 * (t % 12) for t in range(len(tokens))]
    out = tiny_engine.forward([make_datum(tokens, temperature=temps)], "cross_entropy", None)
    got = torch.tensor(out.outputs[0].logprobs)
    with torch.no_grad():
        logits_TV = base(input_ids=torch.tensor([tokens])).logits[0].double()
    targets = torch.tensor(tokens[1:] + [0])
    expected = torch.stack(
        [torch.log_softmax(logits_TV[t] / temps[t], dim=-1)[targets[t]] for t in range(len(tokens))]
    )
    torch.testing.assert_close(got.double(), expected, atol=2e-5, rtol=0)
    plain = tiny_engine.forward([make_datum(tokens)], "cross_entropy", None)
    assert plain.outputs[0].logprobs != out.outputs[0].logprobs


def test_batch_invariance_with_31_others(tiny_engine: TorchEngine) -> None:
    """A request's tokens and logprobs are the same alone and batched with 31 others."""
    target = SampleRequest(
        prompt=[257, *b"The target request"],
        num_samples=4,
        max_tokens=24,
        temperature=0.8,
        top_p=0.95,
        seed=77,
    )
    others = [
        SampleRequest(
            prompt=[257, *f"other prompt number {i} {'x' * (i % 9)}".encode()],
            num_samples=1 + i % 4,
            max_tokens=8 + i,
            temperature=0.5 + (i % 5) / 4,
            top_k=-1 if i % 3 else 20,
            seed=i,
        )
        for i in range(31)
    ]
    alone = tiny_engine.sample(None, [target])[0]
    batched = tiny_engine.sample(None, [*others[:13], target, *others[13:]])[13]
    for a, b in zip(alone.sequences, batched.sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("chunked", [False, True])
def test_an_overflowing_loss_raises_before_any_gradient(
    make_engine: Callable[..., TorchEngine], monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    """importance_sampling with logprobs 200 nats below the model's: r = exp(200) overflows
    float32, so the loss is infinite; the op raises and the gradients stay as they were
    (whole batch, and micro-batched where the overflow is in the second chunk)."""
    if chunked:
        monkeypatch.setattr("localsession.engine.train_step.CHUNK_TOKENS", 4)  # a row a chunk
    engine = make_engine()
    good = make_datum([1, 2, 3, 4], logprobs=[-5.0] * 4, advantages=[1.0] * 4)
    engine.forward_backward([good], "importance_sampling", None, backward=True)
    before = grads(engine)
    assert before
    bad = make_datum([5, 6, 7, 8], logprobs=[-200.0] * 4, advantages=[1.0] * 4)
    with pytest.raises(EngineInputError, match="the loss is not finite"):
        engine.forward_backward([good, bad], "importance_sampling", None, backward=True)
    after = grads(engine)
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], before[name]) for name in before)


@pytest.mark.parametrize("loss_fn", RL_LOSSES)
def test_micro_batched_backward_reports_what_one_pass_reports(
    make_engine: Callable[..., TorchEngine], monkeypatch: pytest.MonkeyPatch, loss_fn: str
) -> None:
    """The CPU's micro-batching (train_step.row_backward, one row a chunk here) gives the
    unchunked pass's metrics, per-datum outputs and gradients, to float rounding."""
    whole, chunked = make_engine(seed=3), make_engine(seed=3)
    for engine in (whole, chunked):  # one identical step so LoRA B is non-zero
        engine.forward_backward(rl_datums(50), "cross_entropy", None, backward=True)
        engine.optim_step(AdamHyperparams(learning_rate=1e-2))
    datums = rl_datums(seed=7)  # rows of different lengths: the batch is padded
    expected = whole.forward_backward(datums, loss_fn, CONFIG, backward=True)
    monkeypatch.setattr("localsession.engine.train_step.CHUNK_TOKENS", 1)
    got = chunked.forward_backward(datums, loss_fn, CONFIG, backward=True)
    want, have = untimed(expected.metrics), untimed(got.metrics)
    assert want.keys() == have.keys()
    for key, value in want.items():
        assert have[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for o_want, o_have in zip(expected.outputs, got.outputs, strict=True):
        assert output_keys(o_want) == output_keys(o_have)
        for key in output_keys(o_want):
            assert output_row(o_have, key) == pytest.approx(
                output_row(o_want, key), rel=1e-5, abs=1e-6
            )
    g_want, g_have = grads(whole), grads(chunked)
    assert g_want.keys() == g_have.keys()
    for name, g in g_want.items():
        # sums over chunks add in another order: float32 rounding, relative to the tensor
        scale = float(g.abs().max())
        torch.testing.assert_close(g_have[name], g, rtol=1e-5, atol=1e-5 * scale)
