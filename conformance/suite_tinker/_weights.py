"""Reading a trainer's LoRA adapter back, and AdamW's closed form, for the optimizer tests.

The Tinker API lets a client download its adapter: ``save_weights_external(name)`` saves it
and ``RestClient.get_external_weights_urls(path)`` answers one URL per file, a PEFT
``adapter_model.safetensors`` among them (training_client.py, rest_client.py). So a remote
backend's optimizer can be checked element by element against the formula, with no trust in
what the server reports about itself.

AdamW (decoupled weight decay, bias-corrected moments, ``eps`` added to the root of the
second moment) on a parameter ``w`` with gradient ``g_t``::

    w_t = w_{t-1} * (1 - lr * wd) - lr * (m_t / (1 - b1^t)) / (sqrt(v_t / (1 - b2^t)) + eps)
    m_t = b1 * m_{t-1} + (1 - b1) * g_t,   v_t = b2 * v_{t-1} + (1 - b2) * g_t^2

When every step's gradient is ``c_t * g`` with ``c_t`` in {0, 1} and one fixed ``g`` (the
tests take one real gradient, then steps on zero-weight datums, whose gradient is exactly
zero), and ``|g| >> eps``, the update of step ``t`` is ``lr * F_t * sign(g)`` with
:func:`adam_factors`' ``F_t``: a number the test computes from the betas alone.
"""

from __future__ import annotations

import math
import os
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat
from conformance.suite_tinker._kit import needs_sdk, wait

#: The adapter file of a PEFT export.
ADAPTER_FILE = "adapter_model.safetensors"

Weights = dict[str, "np.ndarray[Any, Any]"]


def adam_factors(cs: Sequence[float], beta1: float, beta2: float) -> list[float]:
    """``F_t`` for gradients ``c_t * g`` (t = 1..len(cs)), with eps negligible: the update of
    step t is ``lr * F_t * sign(g)``. ``c_t = 0`` steps still count for bias correction."""
    factors, m, v = [], 0.0, 0.0
    for t, c in enumerate(cs, 1):
        m = beta1 * m + (1 - beta1) * c
        v = beta2 * v + (1 - beta2) * c * c
        factors.append(0.0 if m == 0 else (m / (1 - beta1**t)) / math.sqrt(v / (1 - beta2**t)))
    return factors


def adapter(backend: Backend, tinker_client: Any, trainer: Any, name: str) -> Weights:
    """The trainer's adapter tensors now (float64), by name: ``save_weights_external`` and
    the file its URL serves."""
    from safetensors.numpy import load

    needs_sdk(backend, "training:save_weights_external")
    path = wait(trainer.save_weights_external(name), backend).path
    urls = wait(compat.rest_client(tinker_client).get_external_weights_urls(path), backend).urls
    files = [url for file, url in urls.items() if file.endswith(ADAPTER_FILE)]
    assert len(files) == 1, f"get_external_weights_urls({path}) lists no {ADAPTER_FILE}: {urls}"
    request = urllib.request.Request(
        files[0], headers={"X-API-Key": os.environ.get("TINKER_API_KEY", "")}
    )
    with urllib.request.urlopen(request, timeout=backend.limits.op_timeout_s) as answer:
        tensors = load(answer.read())
    assert tensors, f"{ADAPTER_FILE} of {path} holds no tensor"
    return {key: value.astype(np.float64) for key, value in tensors.items()}


def flat(weights: Weights) -> np.ndarray[Any, Any]:
    """Every tensor's values in one vector, in name order."""
    return np.concatenate([weights[key].ravel() for key in sorted(weights)])


def decayed(before: Weights, lr: float, weight_decay: float) -> np.ndarray[Any, Any]:
    """``w * (1 - lr * wd)``: what decoupled weight decay alone leaves of ``before``."""
    return flat(before) * (1.0 - lr * weight_decay)


def ulp(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A few float32 units in the last place of each value (the adapter's precision)."""
    return 4.0 * np.spacing(np.abs(values).astype(np.float32)).astype(np.float64) + 1e-12


def check_update(
    spec: str,
    update_N: np.ndarray[Any, Any],  # (N,) w_{t-1} * (1 - lr*wd) - w_t, every element
    size: float,
    sign_N: np.ndarray[Any, Any] | None,  # (N,) the sign of g where known, else None
    slack_N: np.ndarray[Any, Any],  # (N,) float32 rounding allowed per element
) -> np.ndarray[Any, Any]:
    """Every element moved by 0 or ``size`` (``lr * F_t``) the same way as ``sign_N``; most
    moved elements by ``size`` to 0.1%. Returns the signs of this update."""
    magnitude = np.abs(update_N)
    tolerance = 1e-3 * size + slack_N
    assert np.all(magnitude <= size + tolerance), (
        f"{spec}: an element moved {magnitude.max():.6g}, more than lr * F = {size:.6g} "
        "(AdamW's bias-corrected step never moves an element further)"
    )
    moved = magnitude > tolerance
    assert moved.any(), f"{spec}: no element of the adapter moved (expected lr * F = {size:.6g})"
    near = np.abs(magnitude[moved] - size) <= tolerance[moved]
    assert near.mean() >= 0.95, (
        f"{spec}: only {near.mean():.1%} of the moved elements moved lr * F = {size:.6g} "
        f"(median {np.median(magnitude[moved]):.6g}); AdamW moves each element with |g| >> eps "
        "by exactly that"
    )
    signs = np.sign(update_N) * moved
    if sign_N is not None:
        agree = (signs == sign_N) | ~moved
        assert agree.mean() >= 0.95, (
            f"{spec}: {1 - agree.mean():.1%} of the elements moved against their first step; "
            "Adam's moments keep the sign of the one gradient they saw"
        )
    return signs
