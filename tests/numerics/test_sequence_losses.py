"""``gspo`` and ``stable_reinforce`` (numerics/sequence_losses.py) against independent
implementations written here: the GSPO-token formula exactly as Tinker's documentation
writes it (autograd through a plain ``exp`` / ``clamp`` / ``minimum``), closed-form values,
and a tiny model whose parameter gradient through the cross-entropy surrogate is compared
with autograd of the loss itself."""

from __future__ import annotations

import math

import pytest
import torch

from localsession.numerics.sequence_losses import (
    gspo,
    stable_reinforce,
    surrogate_weights,
)
from localsession.port import EngineInputError


def f64(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def documented_gspo(
    lp: torch.Tensor, q: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, lo: float, hi: float
) -> torch.Tensor:
    """The documented formula, written independently: s over the marked tokens, each token
    s's value with its own gradient, PPO-style min with the clipped ratio."""
    in_ratio = mask != 0
    log_ratio = (lp.detach() - q)[in_ratio].mean()
    ratio = torch.exp(log_ratio + lp - lp.detach())
    clipped = torch.clamp(ratio, 1 - lo, 1 + hi)
    return -torch.minimum(ratio * adv, clipped * adv)


CASES = [
    # lp, q, advantages, sequence_ratio_mask, eps_low, eps_high
    (
        [-1.0, -0.5, -2.0, -0.7],
        [-1.1, -0.4, -2.3, -0.9],
        [0.0, 1.5, 1.5, 1.5],
        [0, 1, 1, 1],
        0.2,
        0.3,
    ),  # s = exp(0.1667) = 1.18 < 1.3: unclipped, A > 0
    (
        [-1.0, -0.5, -2.0, -0.7],
        [-1.1, -0.9, -2.6, -0.9],
        [0.0, 2.0, 2.0, 2.0],
        [0, 1, 1, 1],
        0.2,
        0.1,
    ),  # s = exp(0.4) = 1.49 > 1.1 with A > 0: clipped, no gradient
    (
        [-1.0, -0.5, -2.0, -0.7],
        [-0.2, -0.1, -1.0, -0.9],
        [0.3, -1.0, -1.0, -1.0],
        [0, 1, 1, 0],
        0.05,
        0.3,
    ),  # s over tokens 1-2 only = exp(-0.7) = 0.50 < 0.95 with A < 0: clipped
    (
        [-1.0, -0.5, -2.0, -0.7],
        [-0.2, -0.1, -1.0, -0.9],
        [0.3, 1.0, 1.0, 1.0],
        [0, 1, 1, 0],
        0.05,
        0.3,
    ),  # s = 0.50 < lo but A > 0: min takes the unclipped term, gradient s·A
    (
        [-1.3, -0.2, -0.9],
        [-1.3, -0.25, -0.8],
        [1.0, -0.5, 2.0],
        [1, 1, 1],
        3e-4,
        4e-4,
    ),  # the paper's tiny epsilons, mixed-sign advantages
]


@pytest.mark.parametrize("lp, q, adv, mask, lo, hi", CASES)
def test_gspo_values_and_gradients_match_the_documented_formula(
    lp: list[float],
    q: list[float],
    adv: list[float],
    mask: list[float],
    lo: float,
    hi: float,
) -> None:
    lp_ours = f64(lp).requires_grad_(True)
    lp_ref = f64(lp).requires_grad_(True)
    ours = gspo(lp_ours, f64(q), f64(adv), f64(mask), lo, hi)
    ref = documented_gspo(lp_ref, f64(q), f64(adv), f64(mask), lo, hi)
    torch.testing.assert_close(ours, ref.detach())
    ours.sum().backward()
    ref.sum().backward()
    assert lp_ours.grad is not None and lp_ref.grad is not None
    torch.testing.assert_close(lp_ours.grad, lp_ref.grad)


def test_gspo_closed_form_one_case() -> None:
    # s = exp(mean(0.1, -0.1, 0.3)) = exp(0.1); A = 2 on the last two tokens, eps 0.2 / 0.2
    lp = f64([-1.0, -2.0, -0.5]).requires_grad_(True)
    q = f64([-1.1, -1.9, -0.8])
    loss = gspo(lp, q, f64([0.0, 2.0, 2.0]), f64([1, 1, 1]), 0.2, 0.2)
    s = math.exp(0.1)
    torch.testing.assert_close(loss.detach(), f64([0.0, -2 * s, -2 * s]))
    loss.sum().backward()
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, f64([0.0, -2 * s, -2 * s]))


def test_gspo_masked_positions_do_not_move_the_ratio() -> None:
    lp, adv = f64([-1.0, -1.0, -1.0]), f64([1.0, 1.0, 1.0])
    mask = f64([0, 1, 1])
    a = gspo(lp, f64([-50.0, -1.0, -1.0]), adv, mask, 0.2, 0.2)
    b = gspo(lp, f64([-1.0, -1.0, -1.0]), adv, mask, 0.2, 0.2)
    torch.testing.assert_close(a, b)  # position 0's wild q is outside the mask
    torch.testing.assert_close(a, f64([-1.0, -1.0, -1.0]))  # s = 1


def test_gspo_refuses_an_empty_ratio_mask() -> None:
    with pytest.raises(EngineInputError, match="sequence_ratio_mask"):
        gspo(f64([-1.0]), f64([-1.0]), f64([1.0]), f64([0.0]))


def test_gspo_huge_ratio_on_a_clipped_token_stays_finite() -> None:
    lp = f64([-1.0, -1.0]).requires_grad_(True)
    loss = gspo(lp, f64([-900.0, -900.0]), f64([0.0, 1.0]), f64([1, 1]), 0.2, 0.2)
    loss.sum().backward()
    assert lp.grad is not None
    assert torch.isfinite(loss).all() and torch.isfinite(lp.grad).all()
    torch.testing.assert_close(loss.detach(), f64([0.0, -1.2]))


def test_stable_reinforce_closed_form() -> None:
    # r = exp(lp - q): exp(0.2) on token 1, exp(2.0) > cap 2 on token 2; token 0 is prompt
    lp = f64([-3.0, -1.0, -0.5]).requires_grad_(True)
    q = f64([0.0, -1.2, -2.5])
    sampled = torch.tensor([False, True, True])
    loss = stable_reinforce(lp, q, f64([5.0, 1.0, -2.0]), sampled, cap=2.0)
    r1 = math.exp(0.2)
    torch.testing.assert_close(loss.detach(), f64([0.0, -(r1 * 1.0 * -1.0), -(2.0 * -2.0 * -0.5)]))
    loss.sum().backward()
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, f64([0.0, -r1 * 1.0, -(2.0 * -2.0)]))


def test_surrogate_weights_are_minus_the_loss_gradient() -> None:
    lp = [-1.0, -0.5, -2.0, -0.7]
    q, adv, mask = f64([-1.1, -0.4, -2.3, -0.9]), f64([0.0, 1.5, 1.5, 1.5]), f64([0, 1, 1, 1])
    loss, weights = surrogate_weights(lambda x: gspo(x, q, adv, mask, 0.2, 0.3), lp)
    s = math.exp(((-0.5 + 0.4) + (-2.0 + 2.3) + (-0.7 + 0.9)) / 3)
    assert weights == pytest.approx([0.0, 1.5 * s, 1.5 * s, 1.5 * s])
    assert loss == pytest.approx([0.0, -1.5 * s, -1.5 * s, -1.5 * s])


@pytest.mark.parametrize("which", ["gspo", "stable_reinforce"])
def test_cross_entropy_surrogate_has_the_loss_gradient_through_a_model(which: str) -> None:
    """A tiny linear 'model': lp = log_softmax(x @ W)[target]. The gradient of
    Σ -w·lp (w from surrogate_weights at the current W) equals autograd of the loss."""
    torch.manual_seed(0)
    x, weight = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 7, dtype=torch.float64)
    targets = torch.tensor([1, 3, 0, 6, 2])
    q, adv = f64([-1.9, -2.2, -1.5, -2.8, -1.7]), f64([0.0, 0.8, 0.8, -0.4, 0.8])
    mask = f64([0, 1, 1, 1, 1])
    sampled = mask != 0

    def loss_of(lp: torch.Tensor) -> torch.Tensor:
        if which == "gspo":
            return gspo(lp, q, adv, mask, 0.3, 0.3)
        return stable_reinforce(lp, q, adv, sampled, 2.0)

    def lp_of(w: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x @ w, -1).gather(-1, targets[:, None]).squeeze(-1)

    w_direct = weight.clone().requires_grad_(True)
    loss_of(lp_of(w_direct)).sum().backward()
    _, ce_weights = surrogate_weights(loss_of, lp_of(weight).tolist())
    w_surrogate = weight.clone().requires_grad_(True)
    (-(f64(ce_weights) * lp_of(w_surrogate))).sum().backward()
    assert w_direct.grad is not None and w_surrogate.grad is not None
    assert w_direct.grad.abs().sum() > 0
    torch.testing.assert_close(w_surrogate.grad, w_direct.grad)
