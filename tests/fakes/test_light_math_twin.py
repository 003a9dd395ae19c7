"""The light fake's scalar losses are the shared tensor losses, token by token.

``fakes/light_math.py`` writes each loss per token for plain floats (no torch);
``localsession/numerics/losses.py`` writes them as tensors for the torch and bigram engines.
Nothing in the code ties the two, so this pins them together on random inputs: the loss,
its derivative by ``lp`` (autograd on the tensor side) and the ``pg_clipfrac`` indicator,
for every loss and a spread of clip bounds.
"""

from __future__ import annotations

import pytest
import torch

from fakes import light_math
from localsession import vocab
from localsession.numerics import losses
from localsession.numerics.inputs import ClipConfig

N = 400


def tensor_twin(
    loss_fn: str, lp: torch.Tensor, q: torch.Tensor, adv: torch.Tensor, w: torch.Tensor,
    clip: ClipConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Per-token loss, dloss/dlp and clipped indicator from numerics.losses. -> three [N]."""
    lp = lp.clone().requires_grad_(True)
    if loss_fn == "cross_entropy":
        loss = losses.cross_entropy(lp, w)
    elif loss_fn == "importance_sampling":
        loss = losses.importance_sampling(lp, q, adv, w)
    elif loss_fn == "ppo":
        loss = losses.ppo(lp, q, adv, w, clip.low, clip.high)
    else:
        loss = losses.cispo(lp, q, adv, w, clip.low, clip.high)
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    clipped = losses.clipped_positions(loss_fn, (lp - q).detach(), adv, clip)
    if loss_fn == "cross_entropy":
        clipped = torch.zeros_like(clipped)
    return loss.detach(), grad, clipped.to(torch.float64)


@pytest.mark.parametrize("loss_fn", vocab.LOSS_FUNCTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scalar_losses_match_the_tensor_losses(loss_fn: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    lp_N = -torch.rand(N, generator=gen, dtype=torch.float64) * 6  # log-probs in (-6, 0]
    q_N = lp_N + torch.randn(N, generator=gen, dtype=torch.float64) * 0.7  # ratios ~ e^±2
    adv_N = torch.randn(N, generator=gen, dtype=torch.float64)
    adv_N[::17] = 0.0  # A = 0 never counts as clipped
    w_N = torch.rand(N, generator=gen, dtype=torch.float64) + 0.05
    low = float(torch.rand(1, generator=gen)) * 0.9 + 0.05
    high = 1.0 + float(torch.rand(1, generator=gen)) * 3.0
    clip = ClipConfig(low, high)

    want_loss, want_grad, want_clipped = tensor_twin(loss_fn, lp_N, q_N, adv_N, w_N, clip)
    got = [
        light_math.token_loss(
            loss_fn,
            float(lp_N[i]),
            {"weights": float(w_N[i]), "advantages": float(adv_N[i]), "logprobs": float(q_N[i])},
            clip,
        )
        for i in range(N)
    ]
    got_loss, got_grad, got_clipped = torch.tensor(got, dtype=torch.float64).unbind(1)  # [N] x3
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-12, atol=1e-12)
    assert torch.equal(got_clipped, want_clipped)
    if loss_fn in ("ppo", "cispo"):
        assert 0 < int(want_clipped.sum()) < N, "the inputs must exercise both sides of the clip"
