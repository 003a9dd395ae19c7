"""The losses of docs/semantics.md#1 against hand-computed closed-form values (no model)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from localsession.numerics.losses import (
    ClipConfig,
    LossInputs,
    batch_metrics,
    cispo,
    clip_config,
    compute_loss,
    cross_entropy,
    datum_metrics,
    datum_sums,
    importance_sampling,
    ppo,
    token_logprobs,
)
from localsession.port import EngineInputError, LossConfig

LN = math.log


def t(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_token_logprobs_closed_form() -> None:
    logits_BTV = torch.log(t([0.5, 0.25, 0.25])).reshape(1, 1, 3).repeat(1, 2, 1)
    targets_BT = torch.tensor([[0, 2]])
    lp = token_logprobs(logits_BTV, targets_BT)
    torch.testing.assert_close(lp, t([[LN(0.5), LN(0.25)]]))


def test_token_logprobs_temperature_per_position() -> None:
    logits_BTV = torch.log(t([0.5, 0.25, 0.25])).reshape(1, 1, 3).repeat(1, 2, 1)
    targets_BT = torch.tensor([[0, 0]])
    temps_BT = t([[1.0, 2.0]])
    lp = token_logprobs(logits_BTV, targets_BT, temps_BT)
    # T = 2: probabilities proportional to sqrt(p) = [0.7071, 0.5, 0.5]
    expected_t2 = LN(math.sqrt(0.5) / (math.sqrt(0.5) + 1.0))
    torch.testing.assert_close(lp, t([[LN(0.5), expected_t2]]))


def test_cross_entropy_is_minus_weighted_lp() -> None:
    lp, w = t([LN(0.5), LN(0.25), -3.0]), t([1.0, 0.0, 2.0])
    torch.testing.assert_close(cross_entropy(lp, w), t([-LN(0.5), 0.0, 6.0]))


def test_importance_sampling_closed_form() -> None:
    lp, q = t([LN(0.5), LN(0.5)]), t([LN(0.25), LN(0.5)])  # r = 2, 1
    adv, w = t([3.0, -1.0]), t([0.5, 1.0])
    torch.testing.assert_close(importance_sampling(lp, q, adv, w), t([-3.0, 1.0]))


def _ppo_case() -> tuple[torch.Tensor, ...]:
    # positions: r = 2 (A>0: clipped to 1.2), r = 0.5 (A<0: clipped to 0.8),
    #            r = 2 (A<0: unclipped term is smaller), r = 0.5 (A>0: unclipped), r = 1
    lp = t([LN(0.5), LN(0.25), LN(0.5), LN(0.25), LN(0.5)])
    q = t([LN(0.25), LN(0.5), LN(0.25), LN(0.5), LN(0.5)])
    adv = t([1.0, -1.0, -1.0, 2.0, 3.0])
    w = t([1.0, 2.0, 1.0, 1.0, 1.0])
    return lp, q, adv, w


def test_ppo_clips_on_both_sides() -> None:
    lp, q, adv, w = _ppo_case()
    loss = ppo(lp, q, adv, w)
    torch.testing.assert_close(loss, t([-1.2, 2 * 0.8, 2.0, -1.0, -3.0]))


def test_ppo_gradient_is_zero_where_clipped() -> None:
    lp, q, adv, w = _ppo_case()
    lp = lp.clone().requires_grad_(True)
    ppo(lp, q, adv, w).sum().backward()
    assert lp.grad is not None
    # d/dlp of -w*r*A = -w*r*A where unclipped; 0 where the clipped branch is taken.
    torch.testing.assert_close(lp.grad, t([0.0, 0.0, 2.0, -1.0, -3.0]))


def test_ppo_custom_bounds() -> None:
    lp, q, adv, w = _ppo_case()
    loss = ppo(lp, q, adv, w, clip_low=0.0, clip_high=10.0)  # nothing clips
    torch.testing.assert_close(loss, -w * torch.exp(lp - q) * adv)


def test_cispo_closed_form_and_stop_gradient() -> None:
    lp = t([LN(0.5), LN(0.25), LN(0.5)]).requires_grad_(True)
    q = t([LN(0.05), LN(0.5), LN(0.5)])  # r = 10 (clipped to 4), 0.5, 1
    adv, w = t([1.0, 2.0, -1.0]), t([1.0, 1.0, 2.0])
    loss = cispo(lp, q, adv, w)
    coeff = [4.0, 0.5, 1.0]
    expected = [-w[i].item() * coeff[i] * adv[i].item() * lp[i].item() for i in range(3)]
    torch.testing.assert_close(loss.detach(), t(expected))
    loss.sum().backward()
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, t([-4.0, -1.0, 2.0]))  # -w·clip(r)·A


def test_cispo_low_bound() -> None:
    lp, q = t([LN(0.1)]), t([LN(0.5)])  # r = 0.2
    loss = cispo(lp, q, t([1.0]), t([1.0]), clip_low=0.5, clip_high=4.0)
    torch.testing.assert_close(loss, t([-0.5 * LN(0.1)]))


def test_compute_loss_metrics_ppo() -> None:
    lp, q, adv, w = _ppo_case()
    loss, metrics = compute_loss(
        "ppo", lp, LossInputs(weights=w, sampler_logprobs=q, advantages=adv), ClipConfig(0.8, 1.2)
    )
    assert metrics["loss"] == pytest.approx(-1.2 + 1.6 + 2.0 - 1.0 - 3.0, abs=1e-5)
    # clipped at positions 0 (w 1) and 1 (w 2): fraction 3 / 6
    assert metrics["actor/pg_clipfrac"] == pytest.approx(3 / 6)
    triples = zip(w.tolist(), q.tolist(), lp.tolist(), strict=True)
    kl = sum(wi * (qi - li) for wi, qi, li in triples) / 6
    assert metrics["actor/ppo_kl"] == pytest.approx(kl, abs=1e-6)
    assert "actor/kl_ref" not in metrics


def test_compute_loss_metrics_cispo_and_kl_ref() -> None:
    lp = t([LN(0.5), LN(0.25), LN(0.5)])
    q = t([LN(0.05), LN(0.5), LN(0.5)])  # r = 10, 0.5, 1; with lo 0.6 -> positions 0, 1 clip
    ref = t([LN(0.25), LN(0.25), LN(0.25)])
    w = t([1.0, 1.0, 2.0])
    _, metrics = compute_loss(
        "cispo",
        lp,
        LossInputs(weights=w, sampler_logprobs=q, advantages=t([1.0, 1.0, 1.0]), ref_logprobs=ref),
        ClipConfig(0.6, 4.0),
    )
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 4)
    assert metrics["actor/kl_ref"] == pytest.approx((LN(2) + 0.0 + 2 * LN(2)) / 4, abs=1e-6)


def test_compute_loss_mask_and_zero_weights_give_finite_metrics() -> None:
    lp = t([LN(0.5), 0.0])
    q = t([LN(0.5), -1000.0])  # padding position holds garbage: r = exp(1000) = inf
    mask = torch.tensor([True, False])
    loss, metrics = compute_loss(
        "importance_sampling",
        lp,
        LossInputs(weights=t([0.0, 0.0]), sampler_logprobs=q, advantages=t([1.0, 1.0]), mask=mask),
        ClipConfig(0.0, 10.0),
    )
    assert loss[1].item() == 0.0
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/ppo_kl"] == 0.0


def test_importance_sampling_reports_no_clipping() -> None:
    lp, q, adv, w = _ppo_case()
    _, metrics = compute_loss(
        "importance_sampling",
        lp,
        LossInputs(weights=w, sampler_logprobs=q, advantages=adv),
        ClipConfig(0.0, 10.0),
    )
    assert metrics["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize(
    ("loss_fn", "expected"),
    [("ppo", (0.8, 1.2)), ("cispo", (0.0, 4.0))],
)
def test_config_defaults(loss_fn: str, expected: tuple[float, float]) -> None:
    clip = clip_config(loss_fn, None)
    assert (clip.low, clip.high) == expected
    assert clip_config(loss_fn, LossConfig()) == clip


def test_config_overrides_and_bounds() -> None:
    clip = clip_config("ppo", LossConfig(clip_low_threshold=0.5, clip_high_threshold=10.0))
    assert (clip.low, clip.high) == (0.5, 10.0)
    assert clip_config("ppo", LossConfig(clip_low_threshold=0.0)) == ClipConfig(0.0, 1.2)
    assert clip_config("cispo", LossConfig(clip_high_threshold=1.0)) == ClipConfig(0.0, 1.0)


def test_unknown_loss_fn_rejected() -> None:
    with pytest.raises(EngineInputError, match="dpo"):
        clip_config("dpo", None)


def test_datum_sums_keep_a_non_finite_row_and_metrics_take_the_given_sums() -> None:
    loss = t([[1.0, 2.0, 0.5], [math.inf, 1.0, 0.0]])
    assert datum_sums(loss) == [3.5, math.inf]  # read back as computed, for the finite check
    inputs = LossInputs(weights=torch.ones(2, 3))
    clip = ClipConfig(0.8, 1.2)
    values = datum_metrics("cross_entropy", torch.zeros(2, 3), loss, inputs, clip, [7.0, 9.0])
    assert values["actor/pg_loss"] == [7.0, 9.0]  # the caller's sums, not summed again
    assert datum_metrics("cross_entropy", torch.zeros(2, 3), loss, inputs, clip) == {
        "actor/pg_loss": [3.5, 0.0]  # summed here; the infinite one reported as 0
    }
    metrics = batch_metrics("cross_entropy", torch.zeros(2, 3), inputs, clip, [3.0, 5.0])
    assert metrics == {"loss": 4.0, "actor/pg_loss": 4.0}
