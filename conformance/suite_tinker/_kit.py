"""Helpers of the Tinker-surface suite: datums, waiting within the backend's op timeout,
one SFT step, and comparisons that are exact where the backend promises bit-exactness."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend


def wait(future: Any, backend: Backend) -> Any:
    """``future.result()`` within the backend's op timeout."""
    return future.result(timeout=backend.limits.op_timeout_s)


def datum(backend: Backend, tokens: list[int], **inputs: list[float]) -> Any:
    """Next-token prediction over ``tokens``; ``inputs`` add per-position loss inputs
    (weights default to 1 everywhere)."""
    types = backend.ts.types
    inputs.setdefault("weights", [1.0] * (len(tokens) - 1))
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], **inputs},
    )


def loss_of(backend: Backend, trainer: Any, tokens: list[int]) -> float:
    """``loss:sum`` of a cross-entropy forward over ``tokens`` (no gradient)."""
    out = wait(trainer.forward([datum(backend, tokens)], "cross_entropy"), backend)
    return float(out.metrics["loss:sum"])


def step(backend: Backend, trainer: Any, tokens: list[int]) -> float:
    """One SFT step (forward_backward, optim_step); returns its forward_backward loss."""
    fb = trainer.forward_backward([datum(backend, tokens)], "cross_entropy")
    opt = trainer.optim_step(
        backend.ts.types.AdamParams(learning_rate=backend.limits.learning_rate)
    )
    loss = float(wait(fb, backend).metrics["loss:sum"])
    wait(opt, backend)
    return loss


def close(a: float, b: float, exact: bool, rel: float = 1e-4) -> bool:
    """``a == b`` when the backend promises bit-exactness, else within ``rel``."""
    return a == b if exact else a == pytest.approx(b, rel=rel, abs=1e-6)
