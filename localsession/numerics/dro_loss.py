"""The ``dro`` loss (Tinker's DRO: direct reward optimisation with a quadratic penalty), as
pure, torch-free functions over one datum's per-token values.

Per token, with ``lp`` the trained model's log-probability of the target, ``q`` the
sampler's (``logprobs``), ``A`` the advantage, ``w`` the weight (1 unless given) and
``beta`` the penalty (``loss_fn_config["beta"]``, default ``vocab.TINKER_DRO_BETA``)::

    loss = -w * (lp * A - beta / 2 * (lp - q) ** 2)
    d loss / d lp = -w * (A - beta * (lp - q))

so a ``cross_entropy`` backward whose weights are ``w * (A - beta * (lp - q))``, computed at
the same weights, has exactly DRO's gradient (cross entropy's is ``-weight`` per token).
The Tinker dialect runs ``dro`` that way: a forward for ``lp``, then that backward
(server/tinker/dro.py). The SDK's documentation gives the formula but no default ``beta``.
"""

from __future__ import annotations

from collections.abc import Sequence


def dro_loss(
    lp: Sequence[float],
    q: Sequence[float],
    advantages: Sequence[float],
    weights: Sequence[float],
    beta: float,
) -> list[float]:
    """The elementwise DRO loss of one datum (its sum is the datum's ``loss:sum`` share)."""
    return [
        -w * (x * a - 0.5 * beta * (x - s) ** 2)
        for x, s, a, w in zip(lp, q, advantages, weights, strict=True)
    ]


def dro_backward_weights(
    lp: Sequence[float],
    q: Sequence[float],
    advantages: Sequence[float],
    weights: Sequence[float],
    beta: float,
) -> list[float]:
    """The cross-entropy weights whose backward at ``lp`` is DRO's: ``w * (A - beta*(lp - q))``."""
    return [w * (a - beta * (x - s)) for x, s, a, w in zip(lp, q, advantages, weights, strict=True)]
