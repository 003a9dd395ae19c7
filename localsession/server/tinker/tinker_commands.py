"""Tinker's request values as the port's typed values (``port``, ``port_commands``).

The Tinker dialect's parsing of what its requests carry into what the runtime's typed
commands take: datums with Tinker's default weights, a ``loss_fn_config``, ``adam_params``
numbers. The runtime checks the values' ranges; what is checked here is what only this
wire can get wrong (an unknown key, a value that is not a number).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from localsession import vocab
from localsession.port import AdamHyperparams, LossConfig, TrainingDatum
from localsession.runtime import errors


def weighted(given: TrainingDatum) -> TrainingDatum:
    """Tinker's losses weigh every position 1 unless told otherwise."""
    inputs = given.loss_fn_inputs
    if "weights" in inputs or "target_tokens" not in inputs:
        return given
    weights = [1.0] * len(inputs["target_tokens"])
    return replace(given, loss_fn_inputs={**inputs, "weights": weights})


def loss_config(config: dict[str, Any]) -> LossConfig | None:
    """``loss_fn_config`` as the port's value (the runtime checks the bounds' ranges)."""
    if not config:
        return None
    for key, value in config.items():
        if key not in vocab.LOSS_CONFIG_KEYS:
            raise errors.validation(
                f"loss_fn_config has unknown key {key!r}; the keys are "
                + " and ".join(vocab.LOSS_CONFIG_KEYS)
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise errors.validation(f"loss_fn_config.{key}={value!r} must be a number")
    return LossConfig(**{key: float(value) for key, value in config.items()})


def number(params: dict[str, Any], key: str, default: float) -> float:
    """One ``adam_params`` value: a finite number (``default`` when left out)."""
    given = params.get(key)
    if given is None:
        given = default
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given):
        raise errors.validation(f"adam_params.{key}={given!r} must be a finite number")
    return float(given)


def adam_params(params: dict[str, Any]) -> AdamHyperparams:
    """``adam_params`` as the port's value: the SDK's default for each key left out
    (``vocab.TINKER_ADAM_DEFAULTS``); a ``grad_clip_norm`` of 0 turns clipping off."""
    given = {
        key: number(params, key, fallback) for key, fallback in vocab.TINKER_ADAM_DEFAULTS.items()
    }
    clip = given.pop("grad_clip_norm")
    return AdamHyperparams(**given, grad_clip_norm=clip or None)


def unsupported_loss(loss_fn: str) -> errors.ServiceError:
    """The refusal of a ``loss_fn`` this server does not run."""
    known = loss_fn in vocab.TINKER_LOSSES
    return errors.validation(
        f"loss_fn {loss_fn!r} is "
        + ("not implemented by localsession" if known else "not a Tinker loss")
        + f"; implemented: {', '.join(vocab.TINKER_RUN_LOSSES)}"
        + (
            f" (forward_backward_custom runs client-side on {vocab.LossFunction.CROSS_ENTROPY})"
            if loss_fn == vocab.TinkerLoss.CUSTOM
            else ""
        )
    )
