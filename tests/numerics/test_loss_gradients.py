"""The RL losses against an independent, scalar implementation written here, values and
gradients with respect to the log-probabilities (``torch.autograd`` on both sides).

The reference computes every position on its own with Python ``min``/``max`` on 0-d tensors,
straight from the table in docs/semantics.md#1 Inputs keep every ratio at least 1e-2 away
from the clip bounds, so no position sits on a tie (where sub-gradients are ambiguous).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from localsession.numerics.losses import (
    ClipConfig,
    LossInputs,
    cispo,
    compute_loss,
    importance_sampling,
    ppo,
)

LO, HI = 0.7, 1.3


def reference_term(loss_fn: str, lp: Tensor, q: float, a: float, w: float) -> Tensor:
    """ℓ for one position (0-d ``lp`` with grad), per docs/semantics.md#1"""
    r = torch.exp(lp - q)
    if loss_fn == "importance_sampling":
        return -w * r * a
    clipped = torch.clamp(r, min=LO, max=HI)
    if loss_fn == "ppo":
        return -w * torch.minimum(r * a, clipped * a)
    return -w * clipped.detach() * a * lp  # cispo


def inputs(seed: int, n: int = 64) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """lp, q, A, w with log-ratios in [-1, 1] and no ratio within 1e-2 of LO or HI."""
    gen = torch.Generator().manual_seed(seed)
    lp = -4 * torch.rand(n, generator=gen) - 0.01
    log_r = 2 * torch.rand(n, generator=gen) - 1
    r = log_r.exp()
    near = ((r - LO).abs() < 1e-2) | ((r - HI).abs() < 1e-2)
    log_r = torch.where(near, log_r + 0.05, log_r)
    q = lp - log_r
    adv = torch.randn(n, generator=gen)
    adv[::7] = 0.0
    w = torch.rand(n, generator=gen) * 2
    w[::5] = 0.0
    return lp, q, adv, w


FUNCS: dict[str, Callable[..., Tensor]] = {
    "importance_sampling": lambda lp, q, a, w: importance_sampling(lp, q, a, w),
    "ppo": lambda lp, q, a, w: ppo(lp, q, a, w, LO, HI),
    "cispo": lambda lp, q, a, w: cispo(lp, q, a, w, LO, HI),
}


@pytest.mark.parametrize("loss_fn", sorted(FUNCS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_values_and_gradients_match_reference(loss_fn: str, seed: int) -> None:
    lp, q, adv, w = inputs(seed)
    r = (lp - q).exp()
    assert bool((r > HI).any()) and bool((r < LO).any())  # both clip sides are exercised
    ours_lp = lp.clone().requires_grad_(True)
    ours = FUNCS[loss_fn](ours_lp, q, adv, w)
    (ours_grad,) = torch.autograd.grad(ours.sum(), ours_lp)
    ref_lp = [lp[i].clone().double().requires_grad_(True) for i in range(len(lp))]
    ref = [
        reference_term(loss_fn, ref_lp[i], float(q[i]), float(adv[i]), float(w[i]))
        for i in range(len(lp))
    ]
    ref_grad = torch.autograd.grad(torch.stack(ref).sum(), ref_lp)
    torch.testing.assert_close(
        ours.detach().double(), torch.stack(ref).detach(), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(ours_grad.double(), torch.stack(ref_grad), atol=1e-5, rtol=1e-5)


def test_gradient_closed_forms() -> None:
    """d/dlp by hand: IS −w·r·A; ppo −w·r·A unless clipped (0); cispo −w·clip(r)·A."""
    ln = math.log
    lp = torch.tensor([ln(0.5), ln(0.5), ln(0.25), ln(0.25)])
    q = torch.tensor([ln(0.25), ln(0.25), ln(0.5), ln(0.5)])  # r = 2, 2, 0.5, 0.5
    adv = torch.tensor([1.5, -2.0, 1.0, -1.0])
    w = torch.tensor([1.0, 0.5, 2.0, 1.0])
    expected = {
        "importance_sampling": [-3.0, 2.0, -1.0, 0.5],
        # r=2,A>0 clipped (0); r=2,A<0 unclipped; r=0.5,A>0 unclipped; r=0.5,A<0 clipped (0)
        "ppo": [0.0, 2.0, -1.0, 0.0],
        "cispo": [-1.5 * 1.3, 0.5 * 2.0 * 1.3, -2.0 * 0.7, 0.7],  # clip(r) = 1.3, 1.3, .7, .7
    }
    for loss_fn, grad in expected.items():
        x = lp.clone().requires_grad_(True)
        FUNCS[loss_fn](x, q, adv, w).sum().backward()
        assert x.grad is not None
        torch.testing.assert_close(x.grad, torch.tensor(grad), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("loss_fn", sorted(FUNCS))
def test_placeholder_logprobs_at_zero_weight_stay_finite(loss_fn: str) -> None:
    """A -1e4 placeholder `q` on weight-0 (prompt) positions must not poison the gradient."""
    lp = torch.tensor([-1.0, -2.0, -0.5]).requires_grad_(True)
    q = torch.tensor([-1e4, -2.1, -0.4])
    adv, w = torch.tensor([1.0, 1.0, -1.0]), torch.tensor([0.0, 1.0, 1.0])
    loss, metrics = compute_loss(
        loss_fn, lp, LossInputs(weights=w, sampler_logprobs=q, advantages=adv), ClipConfig(LO, HI)
    )
    loss.sum().backward()
    assert lp.grad is not None and bool(torch.isfinite(lp.grad).all())
    assert float(loss[0].detach()) == 0.0 and float(lp.grad[0]) == 0.0
    expected = [
        reference_term(loss_fn, lp[i].detach(), float(q[i]), float(adv[i]), float(w[i]))
        for i in (1, 2)
    ]
    torch.testing.assert_close(loss[1:].detach(), torch.stack(expected))
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["actor/ppo_kl"] == pytest.approx(((-2.1 + 2.0) + (-0.4 + 0.5)) / 2, abs=1e-6)


def test_ppo_huge_ratio_on_the_clipped_side_has_zero_gradient() -> None:
    """r = e^200 with A > 0: ℓ = −w·hi·A exactly, gradient 0 (a naive exp gives NaN)."""
    lp = torch.tensor([-0.5]).requires_grad_(True)
    q = torch.tensor([-200.5])
    loss = ppo(lp, q, torch.tensor([2.0]), torch.tensor([1.0]), LO, HI)
    loss.sum().backward()
    assert float(loss.detach()) == pytest.approx(-2.0 * HI)
    assert lp.grad is not None and float(lp.grad) == 0.0


def test_clipfrac_counts_only_changed_terms() -> None:
    lp = torch.zeros(4)
    q = torch.log(torch.tensor([0.5, 0.5, 2.0, 1.0])).neg()  # r = 2, 2, 0.5, 1
    adv = torch.tensor([1.0, 0.0, 1.0, 1.0])
    w = torch.ones(4)
    clip = ClipConfig(LO, HI)
    for loss_fn, frac in (("ppo", 1 / 4), ("cispo", 2 / 4), ("importance_sampling", 0.0)):
        _, m = compute_loss(loss_fn, lp, LossInputs(w, q, adv), clip)
        # ppo: only r=2,A>0 clips (r=0.5,A>0 keeps r·A); cispo: r=2 and r=0.5 with A≠0
        assert m["actor/pg_clipfrac"] == pytest.approx(frac), loss_fn
