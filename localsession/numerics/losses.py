"""The training losses of docs/semantics.md#1, as pure functions over log-probability tensors.

Notation (per position t): ``lp`` = log-probability of ``target_tokens[t]`` under the current
weights, ``q`` = the sampler's ``logprobs`` input, ``A`` = ``advantages``, ``w`` = ``weights``,
``r = exp(lp - q)``, ``sg`` = stop-gradient.

| loss_fn               | per-token loss ℓ                                   |
|-----------------------|----------------------------------------------------|
| `cross_entropy`       | ``-w · lp``                                        |
| `importance_sampling` | ``-w · r · A``                                     |
| `ppo`                 | ``-w · min(r·A, clip(r, lo, hi)·A)``               |
| `cispo`               | ``-w · sg(clip(r, lo, hi)) · A · lp``              |

Shapes: every tensor a loss function takes has one shape, ``[B, T]`` (datums × positions,
right-padded) from the engines or ``[T]`` for one datum, and so does the ℓ it returns.
Every loss function returns the elementwise ℓ (same shape as its inputs); the caller sums
(reduction = plain sum, no normalisation, so splitting a batch across calls is exact). Nothing
here touches a model; ``token_logprobs`` turns logits into ``lp``.

The reported ``loss`` is a per-datum mean, as the SDK reads it (it folds a chunked batch's
``loss`` by a datum-count-weighted mean): the mean over datums of each datum's Σ ℓ, so the
``loss`` of a batch equals the SDK's fold of its chunks, while the gradient stays the plain
sum. Each datum's own diagnostics come from :func:`datum_metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from localsession import vocab
from localsession.numerics.inputs import ClipConfig, check_loss_fn, clip_config, finite_or_raise
from localsession.port import EngineInputError

# The clip bounds live in numerics.inputs (torch-free); re-exported here for the engines.
__all__ = [
    "ELEMENTWISE",
    "ClipConfig",
    "LossInputs",
    "LossReport",
    "batch_metrics",
    "check_loss_fn",
    "cispo",
    "clip_config",
    "compute_loss",
    "cross_entropy",
    "datum_sums",
    "finite_loss_terms",
    "importance_sampling",
    "loss_report",
    "loss_terms",
    "ppo",
    "ppo_clipped_side",
    "token_logprobs",
]


def token_logprobs(
    logits_BTV: Tensor, targets_BT: Tensor, temperature_BT: Tensor | None = None
) -> Tensor:
    """log softmax(logits / temperature)[target] per position, in float32. -> [B, T].

    ``temperature_BT`` (optional, > 0) divides each position's logits (docs/semantics.md#1:
    reproduces the sampler's tempered log-probabilities). Computed as torch's fused
    cross-entropy, whose backward holds one vocabulary-wide tensor fewer than gather +
    logsumexp (SmolLM2-135M, 8×256 tokens in one batch, live-memory peak: 4.59 GB, as a
    hand-written cross-entropy loop's 4.57 GB, against 4.97 GB).
    """
    logits_BTV = logits_BTV.float()
    if temperature_BT is not None:
        logits_BTV = logits_BTV / temperature_BT.to(torch.float32).unsqueeze(-1)
    vocab = logits_BTV.shape[-1]
    nll_N = torch.nn.functional.cross_entropy(
        logits_BTV.reshape(-1, vocab), targets_BT.reshape(-1), reduction="none"
    )
    return -nll_N.view(targets_BT.shape)


def cross_entropy(lp: Tensor, weights: Tensor) -> Tensor:
    """ℓ = -w · lp."""
    return -weights * lp


def _ratio(lp: Tensor, sampler_lp: Tensor) -> Tensor:
    return torch.exp(lp - sampler_lp)


def ppo_clipped_side(
    log_ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> Tensor:
    """Where ppo takes the clipped term: ``clip(r)·A < r·A``, decided in log space. -> bool.

    For A > 0 that is r > hi; for A < 0 it is r < lo; never for A = 0.
    """
    log_hi = math.log(clip_high)
    log_lo = math.log(clip_low) if clip_low > 0 else -math.inf
    return torch.where(advantages > 0, log_ratio > log_hi, (advantages < 0) & (log_ratio < log_lo))


def clipped_positions(
    loss_fn: str, log_ratio: Tensor, advantages: Tensor, clip: ClipConfig
) -> Tensor:
    """Where an RL loss's clipping changed the term (the ``actor/pg_clipfrac`` numerator):
    ppo's clipped side, cispo's ratio outside [lo, hi] with A ≠ 0, never for
    importance_sampling. -> bool, the shape of ``log_ratio``."""
    if loss_fn == vocab.LossFunction.PPO:
        return ppo_clipped_side(log_ratio, advantages, clip.low, clip.high)
    if loss_fn == vocab.LossFunction.CISPO:
        ratio = torch.exp(log_ratio)
        return ((ratio > clip.high) | (ratio < clip.low)) & (advantages != 0)
    return torch.zeros_like(log_ratio, dtype=torch.bool)


def importance_sampling(
    lp: Tensor, sampler_lp: Tensor, advantages: Tensor, weights: Tensor
) -> Tensor:
    """ℓ = -w · r · A with r = exp(lp - q)."""
    return -weights * _ratio(lp, sampler_lp) * advantages


def ppo(
    lp: Tensor,
    sampler_lp: Tensor,
    advantages: Tensor,
    weights: Tensor,
    clip_low: float = 0.8,
    clip_high: float = 1.2,
) -> Tensor:
    """ℓ = -w · min(r·A, clip(r, lo, hi)·A).

    Computed branch by branch: where the clipped term is the minimum it is the constant
    ``bound·A`` (no gradient, as in the formula), and ``exp`` only ever sees the log-ratios
    of the unclipped branch. So a huge ratio on the clipped side (``q`` far below ``lp``
    with A > 0) gives a finite loss and a zero gradient instead of ``0·inf = NaN``.
    """
    log_ratio = lp - sampler_lp
    clipped_side = ppo_clipped_side(log_ratio.detach(), advantages, clip_low, clip_high)
    bound = torch.where(
        advantages > 0, torch.full_like(lp, clip_high), torch.full_like(lp, clip_low)
    )
    ratio = torch.exp(torch.where(clipped_side, torch.zeros_like(log_ratio), log_ratio))
    term = torch.where(clipped_side, bound * advantages, ratio * advantages)
    return -weights * term


def cispo(
    lp: Tensor,
    sampler_lp: Tensor,
    advantages: Tensor,
    weights: Tensor,
    clip_low: float = 0.0,
    clip_high: float = 4.0,
) -> Tensor:
    """ℓ = -w · sg(clip(r, lo, hi)) · A · lp."""
    coeff = _ratio(lp, sampler_lp).clamp(clip_low, clip_high).detach()
    return -weights * coeff * advantages * lp


@dataclass
class LossInputs:
    """Per-position loss inputs, all the same shape as ``lp`` (padding masked by ``mask``)."""

    weights: Tensor
    sampler_logprobs: Tensor | None = None
    advantages: Tensor | None = None
    ref_logprobs: Tensor | None = None
    mask: Tensor | None = None  # bool; False at padding positions


def _weighted_mean(values: Tensor, weights: Tensor) -> float:
    total_w = float(weights.sum())
    if total_w == 0.0:
        return 0.0
    terms = torch.where(weights != 0, weights * values, torch.zeros_like(values))
    out = float(terms.sum()) / total_w
    return out if math.isfinite(out) else 0.0


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _rows(x: Tensor) -> Tensor:
    """``[B, T]`` as is; a 1-D ``[T]`` as one datum ``[1, T]``."""
    return x.unsqueeze(0) if x.dim() == 1 else x


def _row_weighted_mean(values_BT: Tensor, w_BT: Tensor) -> Tensor:
    """Per row: Σ w·v / Σ w over positions with w ≠ 0 (0 for a row of zero weights). -> [B]"""
    terms_BT = torch.where(w_BT != 0, w_BT * values_BT, torch.zeros_like(values_BT))
    total_B = w_BT.sum(-1)
    safe_B = torch.where(total_B != 0, total_B, torch.ones_like(total_B))
    out_B = torch.where(total_B != 0, terms_BT.sum(-1) / safe_B, torch.zeros_like(total_B))
    return torch.nan_to_num(out_B, nan=0.0, posinf=0.0, neginf=0.0)


def datum_metrics(
    loss_fn: str,
    lp: Tensor,
    loss: Tensor,
    inputs: LossInputs,
    clip: ClipConfig,
    sums: list[float] | None = None,
) -> dict[str, list[float]]:
    """Each datum's (row's) diagnostics, under the SDK's ``actor/*`` names:

    - ``actor/pg_loss``: the datum's Σ ℓ;
    - ``actor/pg_clipfrac`` (RL losses): Σ w·[clipping changed the term] / Σ w;
    - ``actor/ppo_kl`` (RL losses): Σ w·(q − lp) / Σ w;
    - ``actor/kl_ref`` (when ``ref_logprobs`` is given): Σ w·(lp − ref) / Σ w.

    ``lp`` and ``loss`` are ``[B, T]`` (or one datum's ``[T]``); ``loss`` is the elementwise ℓ
    :func:`compute_loss` returned; ``sums``, its :func:`datum_sums` when the caller has them.
    Every value is finite.
    """
    sums = datum_sums(loss) if sums is None else sums
    out: dict[str, list[float]] = {vocab.Metric.PG_LOSS: [_finite(x) for x in sums]}
    if loss_fn not in vocab.RL_LOSSES and inputs.ref_logprobs is None:
        return out  # cross_entropy: the weighted means below are not reported
    lp_BT = _rows(lp.detach())
    w_BT = _rows(_active_weights(inputs))  # every tensor here is detached: no graph
    if loss_fn in vocab.RL_LOSSES:
        assert inputs.sampler_logprobs is not None and inputs.advantages is not None
        q_BT, adv_BT = _rows(inputs.sampler_logprobs), _rows(inputs.advantages)
        clipped_BT = clipped_positions(loss_fn, lp_BT - q_BT, adv_BT, clip)
        out[vocab.Metric.PG_CLIPFRAC] = _row_weighted_mean(clipped_BT.to(w_BT.dtype), w_BT).tolist()
        out[vocab.Metric.PPO_KL] = _row_weighted_mean(q_BT - lp_BT, w_BT).tolist()
    if inputs.ref_logprobs is not None:
        out[vocab.Metric.KL_REF] = _row_weighted_mean(
            lp_BT - _rows(inputs.ref_logprobs), w_BT
        ).tolist()
    return out


def _mean(values: list[float]) -> float:
    return _finite(math.fsum(values) / len(values)) if values else 0.0


#: One loss's elementwise ℓ ``[B, T]`` from ``lp`` ``[B, T]``, the batch's inputs (weights
#: already zero on padding, sampler logprobs already made safe: :func:`loss_terms`) and
#: the clip bounds.
Elementwise = Callable[[Tensor, LossInputs, ClipConfig], Tensor]


def _ratio_inputs(loss_fn: str, inputs: LossInputs) -> tuple[Tensor, Tensor]:
    """``(q, A)`` of a ratio loss, refused when the batch lacks either."""
    if inputs.sampler_logprobs is None or inputs.advantages is None:
        raise EngineInputError(f"{loss_fn} needs `logprobs` and `advantages` inputs")
    return inputs.sampler_logprobs, inputs.advantages


def _importance_sampling_terms(lp: Tensor, x: LossInputs, clip: ClipConfig) -> Tensor:
    q, adv = _ratio_inputs(vocab.LossFunction.IMPORTANCE_SAMPLING, x)
    return importance_sampling(lp, q, adv, x.weights)


def _ppo_terms(lp: Tensor, x: LossInputs, clip: ClipConfig) -> Tensor:
    q, adv = _ratio_inputs(vocab.LossFunction.PPO, x)
    return ppo(lp, q, adv, x.weights, clip.low, clip.high)


def _cispo_terms(lp: Tensor, x: LossInputs, clip: ClipConfig) -> Tensor:
    q, adv = _ratio_inputs(vocab.LossFunction.CISPO, x)
    return cispo(lp, q, adv, x.weights, clip.low, clip.high)


#: Each loss's elementwise function, by name: the one place :func:`loss_terms` dispatches
#: on a loss name (docs/extending.md, "A new loss", step 2).
ELEMENTWISE: dict[str, Elementwise] = {
    vocab.LossFunction.CROSS_ENTROPY: lambda lp, x, clip: cross_entropy(lp, x.weights),
    vocab.LossFunction.IMPORTANCE_SAMPLING: _importance_sampling_terms,
    vocab.LossFunction.PPO: _ppo_terms,
    vocab.LossFunction.CISPO: _cispo_terms,
}


def loss_terms(loss_fn: str, lp: Tensor, inputs: LossInputs, clip: ClipConfig) -> Tensor:
    """Elementwise ℓ ``[B, T]`` of ``lp`` ``[B, T]`` (zero at masked positions), by the
    loss's :data:`ELEMENTWISE` function; its plain sum is what is differentiated.

    That function sees the weights zero at padding, and positions that cannot contribute
    (weight 0, or padding) with ``q`` replaced by ``lp`` (ratio 1), so whatever a caller put
    there (a ``-1e4`` placeholder on prompt tokens, say) can neither overflow ``exp`` nor
    leak a ``0·inf = NaN`` gradient.
    """
    check_loss_fn(loss_fn)
    elementwise = ELEMENTWISE.get(loss_fn)
    if elementwise is None:
        raise EngineInputError(f"loss_fn {loss_fn!r} has no elementwise function (ELEMENTWISE)")
    w = _active_weights(inputs)  # [B, T]
    q = inputs.sampler_logprobs
    if q is not None:  # masked positions have w = 0 here
        q = torch.where(w != 0, q, lp.detach())  # [B, T]
    safe = LossInputs(w, q, inputs.advantages, inputs.ref_logprobs, inputs.mask)
    loss = elementwise(lp, safe, clip)  # [B, T]
    if inputs.mask is not None:
        loss = torch.where(inputs.mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return loss


def finite_loss_terms(
    loss_fn: str, lp: Tensor, inputs: LossInputs, clip: ClipConfig
) -> tuple[Tensor, list[float]]:
    """:func:`loss_terms` ``[B, T]`` and each datum's Σ ℓ ``[B]``; raises
    ``EngineInputError`` when their sum is not finite (call it before any backward)."""
    loss = loss_terms(loss_fn, lp, inputs, clip)  # [B, T]
    sums = datum_sums(loss)  # [B]
    finite_or_raise(sum(sums), "the loss")
    return loss, sums


def _active_weights(inputs: LossInputs) -> Tensor:
    """The weights, zero at masked (padding) positions."""
    if inputs.mask is None:
        return inputs.weights
    return torch.where(inputs.mask, inputs.weights, torch.zeros_like(inputs.weights))


def datum_sums(loss: Tensor) -> list[float]:
    """Each datum's (row's) Σ ℓ of an elementwise loss ``[B, T]`` (or one datum's ``[T]``),
    as computed: a non-finite sum stays non-finite."""
    return _rows(loss.detach()).sum(-1).tolist()  # type: ignore[no-any-return]


def batch_metrics(
    loss_fn: str, lp: Tensor, inputs: LossInputs, clip: ClipConfig, sums: list[float]
) -> dict[str, float]:
    """One batch's metrics (docs/semantics.md#1) from its per-datum loss ``sums``
    (:func:`datum_sums`): ``loss`` and ``actor/pg_loss``, the mean over datums of each
    datum's Σ ℓ; for RL losses ``actor/pg_clipfrac`` (weighted fraction of positions where
    clipping changed the term) and ``actor/ppo_kl`` (Σ w·(q − lp) / Σ w); ``actor/kl_ref``
    (Σ w·(lp − ref) / Σ w) whenever ``ref_logprobs`` is given; the last three over the
    whole batch's tokens. All finite."""
    metrics: dict[str, float] = {vocab.Metric.LOSS: _mean(sums)}
    metrics[vocab.Metric.PG_LOSS] = metrics[vocab.Metric.LOSS]
    if loss_fn not in vocab.RL_LOSSES and inputs.ref_logprobs is None:
        return metrics
    w, lp_d = _active_weights(inputs), lp.detach()  # detached throughout: no graph
    if loss_fn in vocab.RL_LOSSES:
        assert inputs.sampler_logprobs is not None and inputs.advantages is not None
        q, adv = inputs.sampler_logprobs, inputs.advantages
        clipped = clipped_positions(loss_fn, lp_d - q, adv, clip)
        metrics[vocab.Metric.PG_CLIPFRAC] = _weighted_mean(clipped.to(w.dtype), w)
        metrics[vocab.Metric.PPO_KL] = _weighted_mean(q - lp_d, w)
    if inputs.ref_logprobs is not None:
        metrics[vocab.Metric.KL_REF] = _weighted_mean(lp_d - inputs.ref_logprobs, w)
    return metrics


@dataclass
class LossReport:
    """What one batch's loss reports (:func:`loss_report`)."""

    sums: list[float]  # [B]: each datum's Σ ℓ, as computed (possibly non-finite)
    metrics: dict[str, float]  # the batch's (:func:`batch_metrics`)
    per_datum: dict[str, list[float]]  # name -> [B], each datum's (:func:`datum_metrics`)


def loss_report(
    loss_fn: str,
    lp: Tensor,
    loss: Tensor,
    inputs: LossInputs,
    clip: ClipConfig,
    sums: list[float] | None = None,
) -> LossReport:
    """Each datum's Σ ℓ, the batch's metrics and each datum's diagnostics, from the batch's
    logprobs ``lp`` and elementwise loss ``loss`` (``[B, T]`` each, graph or not: everything
    here is detached); ``sums``: :func:`datum_sums` of ``loss`` when the caller has them."""
    sums = datum_sums(loss) if sums is None else sums  # [B]
    metrics = batch_metrics(loss_fn, lp, inputs, clip, sums)
    return LossReport(sums, metrics, datum_metrics(loss_fn, lp, loss, inputs, clip, sums))


def compute_loss(
    loss_fn: str, lp: Tensor, inputs: LossInputs, clip: ClipConfig
) -> tuple[Tensor, dict[str, float]]:
    """Elementwise ℓ (:func:`loss_terms`) and one batch's metrics (:func:`batch_metrics`).
    The gradient of ``ℓ.sum()`` is the plain sum."""
    loss = loss_terms(loss_fn, lp, inputs, clip)
    return loss, batch_metrics(loss_fn, lp, inputs, clip, datum_sums(loss))
