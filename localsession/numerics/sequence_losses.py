"""Tinker's ``gspo`` and ``stable_reinforce`` losses, as pure functions over one datum's
per-token tensors (docs/semantics.md, "GSPO and StableReinforce").

Notation (per target position t of one datum): ``lp`` = log-probability of the target under
the current weights, ``q`` = the sampler's log-probability of it, ``A`` = advantage,
``sg`` = stop-gradient.

**gspo** (Tinker's documented GSPO-token). Over the positions ``M`` that
``sequence_ratio_mask`` marks, the sequence ratio is ``s = exp(mean_{t in M} (lp_t - q_t))``
(its value only: ``lp`` is detached inside the mean); every token carries
``s_t = sg(s) · exp(lp_t - sg(lp_t))`` (value ``s``, gradient ``s · dlp_t``), and

    ℓ_t = -min(s_t · A_t, clip(s_t, 1 - eps_low, 1 + eps_high) · A_t)

**stable_reinforce** (localsession's reading of Tinker's alpha loss; the objective is not
published): a truncated-importance-weight REINFORCE whose sampler log-probabilities are the
ones *recorded when the tokens were sampled* (``q`` here comes from the sampling record, not
from the client's ``logprobs``), over the positions whose provenance is a sampled token:

    ℓ_t = -sampled_t · sg(min(exp(lp_t - q_t), c)) · A_t · lp_t

Both return the elementwise ℓ ``[T]``; the caller sums. The Tinker dialect runs them as a
forward for ``lp`` and then a ``cross_entropy`` backward whose per-token weights are
``-dℓ_t/dlp_t`` (:func:`surrogate_weights`): at the same weights that backward's gradient is
exactly the loss's, since ℓ depends on the parameters only through ``lp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from localsession.port import EngineInputError

#: GSPO's clip half-widths when ``loss_fn_config`` gives none (Zheng et al. 2025's values;
#: Tinker documents the keys, not defaults: a localsession choice).
GSPO_EPSILON_LOW = 3e-4
GSPO_EPSILON_HIGH = 4e-4
#: StableReinforce's importance-weight cap ``c`` (a localsession choice).
STABLE_REINFORCE_CAP = 2.0


def gspo(
    lp_T: Tensor,
    q_T: Tensor,
    adv_T: Tensor,
    ratio_mask_T: Tensor,
    epsilon_low: float = GSPO_EPSILON_LOW,
    epsilon_high: float = GSPO_EPSILON_HIGH,
) -> Tensor:
    """GSPO-token's elementwise loss of one datum. -> [T].

    Computed branch by branch (as ``losses.ppo`` is): where the clipped term is the minimum
    it is the constant ``bound · A``; where ``A = 0`` the term is 0; ``exp`` of the token's
    own log-probability offset only ever runs on the unclipped branch. So a huge sequence
    ratio on a clipped or zero-advantage token gives a finite loss and no NaN gradient.
    """
    in_ratio_T = ratio_mask_T != 0
    if not bool(in_ratio_T.any()):
        raise EngineInputError(
            "`sequence_ratio_mask` marks no position: mark (with 1) the sampled tokens whose "
            "mean log-ratio is the sequence ratio"
        )
    lo, hi = 1.0 - epsilon_low, 1.0 + epsilon_high
    log_s = (lp_T.detach() - q_T)[in_ratio_T].mean()  # scalar, no gradient
    log_s_T = log_s.expand_as(lp_T)
    clipped_T = torch.where(
        adv_T > 0, log_s_T > math.log(hi), (adv_T < 0) & (log_s_T < math.log(lo))
    )
    active_T = (adv_T != 0) & ~clipped_T
    safe_log_s_T = torch.where(active_T, log_s_T, torch.zeros_like(log_s_T))
    s_T = torch.exp(safe_log_s_T + lp_T - lp_T.detach())  # value s, gradient s·dlp
    bound_T = torch.where(adv_T > 0, torch.full_like(lp_T, hi), torch.full_like(lp_T, lo))
    zero_T = torch.zeros_like(lp_T)
    term_T = torch.where(clipped_T, bound_T * adv_T, torch.where(active_T, s_T * adv_T, zero_T))
    return -term_T


def stable_reinforce(
    lp_T: Tensor,
    recorded_q_T: Tensor,
    adv_T: Tensor,
    sampled_T: Tensor,
    cap: float = STABLE_REINFORCE_CAP,
) -> Tensor:
    """StableReinforce's elementwise loss of one datum (localsession's objective). -> [T].

    ``recorded_q_T``: the sampler's log-probability recorded at sampling time for each
    sampled position (anything finite elsewhere); ``sampled_T``: bool, the positions whose
    ``loss_fn_inputs`` provenance is a sampled token. The weight ``min(exp(lp - q), c)`` is
    computed in log space (``exp`` never sees more than ``log c``) and detached.
    """
    log_r_T = torch.where(sampled_T, lp_T.detach() - recorded_q_T, torch.zeros_like(lp_T))
    rho_T = torch.exp(torch.clamp(log_r_T, max=math.log(cap)))
    term_T = torch.where(sampled_T, rho_T * adv_T * lp_T, torch.zeros_like(lp_T))
    return -term_T


def surrogate_weights(
    loss_of_lp: Callable[[Tensor], Tensor], lp: Sequence[float]
) -> tuple[list[float], list[float]]:
    """(elementwise loss, cross-entropy weights ``-dℓ_t/dlp_t``) of one datum at ``lp``.

    A ``cross_entropy`` backward (ℓ = -w·lp) with these weights, taken at the weights that
    produced ``lp``, has exactly the gradient of ``sum(loss_of_lp(lp))`` with respect to the
    model's parameters (chain rule through ``lp``). Every value returned is finite, or the
    datum is refused.
    """
    lp_T = torch.tensor(list(lp), dtype=torch.float64, requires_grad=True)
    loss_T = loss_of_lp(lp_T)
    (grad_T,) = torch.autograd.grad(loss_T.sum(), lp_T, allow_unused=True)
    weights_T = torch.zeros_like(lp_T) if grad_T is None else -grad_T
    loss = [float(v) for v in loss_T.detach()]
    weights = [float(v) for v in weights_T]
    if not all(math.isfinite(v) for v in loss + weights):
        raise EngineInputError(
            "the loss is not finite (exp of the log-ratio lp - logprobs overflowed); check "
            "`logprobs` and `advantages` for extreme values"
        )
    return loss, weights
