"""Loss values: each loss recomputed in closed form from the logprobs ``forward`` reports
(docs/semantics.md#1)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conformance.adapter import Backend
from conformance.suite._kit import (
    TEXT_A,
    TEXT_B,
    logprobs,
    output,
    result,
    rl,
    sft,
    token_loss,
)

#: Ratios r = exp(lp - q) spread across and beyond every clip range the tests use.
RATIOS = [0.5, 0.95, 1.0, 1.05, 1.5, 3.0, 6.0, 0.7]
DEFAULT_CLIP = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0), "importance_sampling": (0.0, math.inf)}


def _current_lp(tc: Any, ts: Any, backend: Backend, tokens: tuple[int, ...]) -> list[float]:
    return logprobs(result(tc.forward([sft(ts, tokens)], "cross_entropy"), backend))[0]


Floats = list[list[float]]


def _rl_batch(ts: Any, lps: Floats) -> tuple[list[Any], Floats, Floats, Floats]:
    """Datums whose sampler logprobs q give the ratios RATIOS, with mixed signs and weights."""
    datums: list[Any] = []
    qs: Floats = []
    advs: Floats = []
    ws: Floats = []
    for d, (tokens, lp) in enumerate(zip((TEXT_A, TEXT_B), lps, strict=True)):
        q = [x - math.log(RATIOS[(i + d) % len(RATIOS)]) for i, x in enumerate(lp)]
        a = [(1.0 if (i + d) % 3 else -2.0) * (0.5 + 0.25 * i) for i in range(len(lp))]
        w = [0.0 if i == 0 else (0.5 if i % 4 == 0 else 1.0) for i in range(len(lp))]
        datums.append(rl(ts, tokens, logprobs=q, advantages=a, weights=w))
        qs.append(q)
        advs.append(a)
        ws.append(w)
    return datums, qs, advs, ws


@pytest.mark.requires("loss.outputs", "loss.formulas", "loss.sum_reduction")
def test_cross_entropy_closed_form(backend: Backend, ts: Any, shared_training_client: Any) -> None:
    weights = [0.0, 1.0, 0.5, 2.0, 1.0, 0.0, 1.0, 1.0]
    out = result(
        shared_training_client.forward([sft(ts, TEXT_A, weights)], "cross_entropy"), backend
    )
    lp = logprobs(out)[0]
    expected = [-w * x for w, x in zip(weights, lp, strict=True)]
    assert output(out, "elementwise_loss")[0] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert out.metrics["loss"] == pytest.approx(sum(expected), rel=1e-5)
    assert all(x <= 0.0 for x in lp)


@pytest.mark.requires("loss.outputs", "loss.formulas", "loss.sum_reduction")
@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
def test_rl_loss_closed_form_with_default_clips(
    backend: Backend, ts: Any, shared_training_client: Any, loss_fn: str
) -> None:
    lps = [_current_lp(shared_training_client, ts, backend, t) for t in (TEXT_A, TEXT_B)]
    datums, qs, advs, ws = _rl_batch(ts, lps)
    out = result(shared_training_client.forward(datums, loss_fn), backend)
    lo, hi = DEFAULT_CLIP[loss_fn]
    total = 0.0
    for d, lp in enumerate(logprobs(out)):
        assert lp == pytest.approx(lps[d], abs=1e-5)  # same weights: same logprobs
        expected = [
            token_loss(loss_fn, lp[i], ws[d][i], qs[d][i], advs[d][i], lo, hi)
            for i in range(len(lp))
        ]
        got = output(out, "elementwise_loss")[d]
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-5), (loss_fn, d)
        total += sum(expected)
    # reported: the mean over datums of each datum's summed loss
    assert out.metrics["loss"] == pytest.approx(total / len(datums), rel=1e-4, abs=1e-5)


@pytest.mark.requires("loss.outputs", "loss.formulas", "loss.sum_reduction")
@pytest.mark.parametrize("loss_fn", ["ppo", "cispo"])
def test_clip_thresholds_are_absolute_ratio_bounds(
    backend: Backend, ts: Any, shared_training_client: Any, loss_fn: str
) -> None:
    lo, hi = 0.9, 2.0
    lps = [_current_lp(shared_training_client, ts, backend, t) for t in (TEXT_A, TEXT_B)]
    datums, qs, advs, ws = _rl_batch(ts, lps)
    config = {"clip_low_threshold": lo, "clip_high_threshold": hi}
    out = result(shared_training_client.forward(datums, loss_fn, loss_fn_config=config), backend)
    expected = sum(
        token_loss(loss_fn, lp[i], ws[d][i], qs[d][i], advs[d][i], lo, hi)
        for d, lp in enumerate(logprobs(out))
        for i in range(len(lp))
    )
    assert out.metrics["loss"] == pytest.approx(expected / len(datums), rel=1e-4, abs=1e-5)


@pytest.mark.requires("loss.rl_metrics", "loss.outputs")
def test_rl_metrics_closed_form(backend: Backend, ts: Any, shared_training_client: Any) -> None:
    lps = [_current_lp(shared_training_client, ts, backend, t) for t in (TEXT_A, TEXT_B)]
    datums, qs, advs, ws = _rl_batch(ts, lps)
    out = result(shared_training_client.forward(datums, "ppo"), backend)
    lo, hi = DEFAULT_CLIP["ppo"]
    sw = kl = clipped = 0.0
    for d, lp in enumerate(logprobs(out)):
        for i, x in enumerate(lp):
            w, q, a = ws[d][i], qs[d][i], advs[d][i]
            r = math.exp(x - q)
            sw += w
            kl += w * (q - x)
            clipped += w * (min(r * a, min(max(r, lo), hi) * a) != r * a)
    assert out.metrics["actor/ppo_kl"] == pytest.approx(kl / sw, rel=1e-4, abs=1e-6)
    assert out.metrics["actor/pg_clipfrac"] == pytest.approx(clipped / sw, abs=1e-6)


def test_metrics_are_finite_numbers(backend: Backend, ts: Any, shared_training_client: Any) -> None:
    lp = [-5.0] * len(TEXT_A)
    datum = rl(ts, TEXT_A, logprobs=lp, advantages=[1.0] * len(TEXT_A))
    for loss_fn in ("cross_entropy", "importance_sampling", "ppo", "cispo"):
        out = result(shared_training_client.forward([datum], loss_fn), backend)
        assert out.metrics, loss_fn
        assert all(isinstance(v, float | int) and math.isfinite(v) for v in out.metrics.values())
        assert out.metrics["global_token_num"] >= len(TEXT_A) - 1


@pytest.mark.requires("loss.outputs", "loss.temperature_input")
def test_temperature_input_tempers_logits(
    backend: Backend, ts: Any, shared_training_client: Any
) -> None:
    """A per-token temperature of 1 reproduces the untempered logprobs; 0.5 changes them
    (the sampler-side relation is checked in test_numerics)."""
    n = len(TEXT_A)
    plain = logprobs(
        result(shared_training_client.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)
    )
    one = rl(ts, TEXT_A, logprobs=[0.0] * n, advantages=[0.0] * n, temperature=[1.0] * n)
    half = rl(ts, TEXT_A, logprobs=[0.0] * n, advantages=[0.0] * n, temperature=[0.5] * n)
    out = result(shared_training_client.forward([one, half], "importance_sampling"), backend)
    lp_one, lp_half = logprobs(out)
    assert lp_one == pytest.approx(plain[0], abs=1e-6)
    assert all(x <= 0.0 for x in lp_half)
    assert max(abs(a - b) for a, b in zip(lp_one, lp_half, strict=True)) > 1e-3


def test_unknown_loss_config_key_is_rejected(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    lp = [-5.0] * len(TEXT_A)
    datum = rl(ts, TEXT_A, logprobs=lp, advantages=[1.0] * len(TEXT_A))
    bad = training_client.forward([datum], "ppo", loss_fn_config={"clip_middle": 1.0})
    with pytest.raises((ts.OperationError, ClientError)):
        result(bad, backend)


@pytest.mark.parametrize(
    "config",
    [{"clip_low_threshold": 1.5}, {"clip_high_threshold": 0.5}, {"clip_high_threshold": 11.0}],
)
def test_clip_thresholds_out_of_range_are_rejected(
    backend: Backend, ts: Any, training_client: Any, config: dict[str, float]
) -> None:
    lp = [-5.0] * len(TEXT_A)
    datum = rl(ts, TEXT_A, logprobs=lp, advantages=[1.0] * len(TEXT_A))
    with pytest.raises((ts.OperationError, ClientError)):
        result(training_client.forward([datum], "ppo", loss_fn_config=config), backend)
