"""Scalar math of the light fake engine: one logit row, one token at a time, no torch.

The formulas are those of docs/semantics.md#1 (losses) and #3 (sampling), written per token
for plain lists; :mod:`localsession.numerics` holds their tensor form for the other engines.
Notation: ``lp`` the token's log-probability, ``q`` the sampler's ``logprobs``, ``A`` the
advantage, ``w`` the weight, ``r = exp(lp − q)``.

| loss_fn               | ℓ                                 | dℓ/dlp               |
|-----------------------|-----------------------------------|----------------------|
| `cross_entropy`       | ``−w·lp``                         | ``−w``               |
| `importance_sampling` | ``−w·r·A``                        | ``−w·r·A``           |
| `ppo` (unclipped)     | ``−w·r·A``                        | ``−w·r·A``           |
| `ppo` (clipped side)  | ``−w·bound·A``                    | ``0``                |
| `cispo`               | ``−w·sg(clip(r, lo, hi))·A·lp``   | ``−w·clip(r)·A``     |
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from localsession import vocab
from localsession.numerics.inputs import ClipConfig
from localsession.port import SampleRequest

Row = list[float]
Loss3 = tuple[float, float, float]


def _exp(x: float) -> float:
    """``exp`` that overflows to infinity instead of raising."""
    return math.exp(x) if x < 709.0 else math.inf


def softmax(logits: Row) -> Row:
    top = max(logits)
    exps = [math.exp(z - top) if z != -math.inf else 0.0 for z in logits]
    total = sum(exps)
    return [e / total for e in exps]


def lp_row(logits: Row, target: int, temperature: float) -> tuple[float, Row]:
    """``log softmax(logits / T)[target]`` and the tempered probabilities."""
    scaled = [z / temperature for z in logits]
    top = max(scaled)
    log_total = top + math.log(sum(math.exp(z - top) for z in scaled))
    probs = [math.exp(z - log_total) for z in scaled]
    return scaled[target] - log_total, probs


#: One token's ``(ℓ, dℓ/dlp, clipped)`` from its ``lp``, its inputs and the clip bounds.
TokenLoss = Callable[[float, dict[str, float], ClipConfig], tuple[float, float, float]]


def token_loss(
    loss_fn: str, lp: float, inputs: dict[str, float], clip: ClipConfig
) -> tuple[float, float, float]:
    """One token's ``(ℓ, dℓ/dlp, clipped)``, by the loss's :data:`TOKEN_LOSSES` entry;
    ``clipped`` is 1.0 where clipping changed the term (the ``actor/pg_clipfrac``
    indicator), else 0.0."""
    return TOKEN_LOSSES[loss_fn](lp, inputs, clip)


def _cross_entropy(lp: float, inputs: dict[str, float], clip: ClipConfig) -> Loss3:
    w = inputs["weights"]
    return -w * lp, -w, 0.0


def _ratio(lp: float, inputs: dict[str, float]) -> tuple[float, float, float, float]:
    """``(w, A, log r, log r as given)``: weight 0 has ratio 1, so a placeholder ``q``
    cannot overflow."""
    w, adv, q_given = inputs["weights"], inputs["advantages"], inputs["logprobs"]
    q = q_given if w != 0.0 else lp
    return w, adv, lp - q, lp - q_given


def _importance_sampling(lp: float, inputs: dict[str, float], clip: ClipConfig) -> Loss3:
    w, adv, log_ratio, _ = _ratio(lp, inputs)
    r = _exp(log_ratio)
    return -w * r * adv, -w * r * adv, 0.0


def _ppo(lp: float, inputs: dict[str, float], clip: ClipConfig) -> Loss3:
    w, adv, log_ratio, log_ratio_given = _ratio(lp, inputs)
    clipped = _ppo_clipped(log_ratio_given, adv, clip)
    if _ppo_clipped(log_ratio, adv, clip):
        bound = clip.high if adv > 0 else clip.low
        return -w * bound * adv, 0.0, clipped
    r = _exp(log_ratio)
    return -w * r * adv, -w * r * adv, clipped


def _cispo(lp: float, inputs: dict[str, float], clip: ClipConfig) -> Loss3:
    w, adv, log_ratio, log_ratio_given = _ratio(lp, inputs)
    r_given = _exp(log_ratio_given)
    clipped = 1.0 if (r_given > clip.high or r_given < clip.low) and adv != 0 else 0.0
    coeff = min(max(_exp(log_ratio), clip.low), clip.high)
    return -w * coeff * adv * lp, -w * coeff * adv, clipped


#: Each loss's per-token function, by name (docs/extending.md, "A new loss", step 3).
TOKEN_LOSSES: dict[str, TokenLoss] = {
    vocab.LossFunction.CROSS_ENTROPY: _cross_entropy,
    vocab.LossFunction.IMPORTANCE_SAMPLING: _importance_sampling,
    vocab.LossFunction.PPO: _ppo,
    vocab.LossFunction.CISPO: _cispo,
}


def _ppo_clipped(log_ratio: float, adv: float, clip: ClipConfig) -> float:
    """Whether ppo takes the clipped term (``clip(r)·A < r·A``), decided in log space."""
    if adv > 0:
        return 1.0 if log_ratio > math.log(clip.high) else 0.0
    if adv < 0 and clip.low > 0:
        return 1.0 if log_ratio < math.log(clip.low) else 0.0
    return 0.0


def sample_row(logits: Row, req: SampleRequest, rng: random.Random) -> tuple[int, float]:
    """One token from a logit row: temperature, top-k, top-p, then an inverse-CDF draw.
    Returns the token and its log-probability at ``T`` (``T = 1`` when greedy), unfiltered."""
    if req.temperature <= 0:
        token = max(range(len(logits)), key=lambda j: (logits[j], -j))
        return token, lp_row(logits, token, 1.0)[0]
    tempered = [z / req.temperature for z in logits]
    order = sorted(range(len(tempered)), key=lambda j: -tempered[j])
    if 0 < req.top_k < len(order):
        order = order[: req.top_k]
    probs = softmax([tempered[j] for j in order])
    if req.top_p < 1.0:
        kept, before = 0, 0.0
        for p in probs:
            if kept > 0 and before >= req.top_p:
                break
            kept, before = kept + 1, before + p
        order, probs = order[:kept], softmax([tempered[j] for j in order[:kept]])
    u, cdf, token = rng.random(), 0.0, order[-1]
    for j, p in zip(order, probs, strict=True):
        cdf += p
        if cdf > u:
            token = j
            break
    return token, lp_row(logits, token, req.temperature)[0]
