"""Small helpers the suite shares: datums, closed-form losses, sampling params, waits.

Everything here is independent of the backend's code: losses are recomputed from the
logprobs a backend reports, with the formulas of docs/semantics.md#1 written out in plain
Python.
"""

from __future__ import annotations

import math
from typing import Any

from conformance.adapter import Backend

TEXT_A = (257, 116, 104, 101, 32, 99, 97, 116)  # BOS "the cat"
TEXT_B = (257, 97, 32, 100, 111, 103)  # BOS "a dog"
TEXT_C = (257, 104, 105, 33)  # BOS "hi!"
PRINTABLE_STOPS = [chr(c) for c in range(33, 127)]


def result(future: Any, backend: Backend) -> Any:
    return future.result(timeout=backend.limits.op_timeout_s)


def sft(ts: Any, tokens: tuple[int, ...] | list[int], weights: list[float] | None = None) -> Any:
    """A cross-entropy datum: predict each next token (SDK docstring: ``tokens[1:] + [0]``)."""
    toks = list(tokens)
    w = weights if weights is not None else [0.0] + [1.0] * (len(toks) - 2) + [0.0]
    return ts.Datum(
        model_input=ts.ModelInput.from_ints(toks),
        loss_fn_inputs={"target_tokens": toks[1:] + [0], "weights": w},
    )


def rl(
    ts: Any,
    tokens: tuple[int, ...] | list[int],
    *,
    logprobs: list[float],
    advantages: list[float],
    weights: list[float] | None = None,
    targets: list[int] | None = None,
    **extra: list[float],
) -> Any:
    """An RL datum (importance_sampling / ppo / cispo inputs); targets default to the next
    tokens, ``tokens[1:] + [0]``."""
    toks = list(tokens)
    return ts.Datum(
        model_input=ts.ModelInput.from_ints(toks),
        loss_fn_inputs={
            "target_tokens": targets if targets is not None else toks[1:] + [0],
            "weights": weights if weights is not None else [1.0] * len(toks),
            "logprobs": logprobs,
            "advantages": advantages,
            **extra,
        },
    )


def scoring_datum(ts: Any, prompt: list[int], completion: list[int], **extra: Any) -> Any:
    """A datum whose logprobs at positions len(prompt)-1.. score ``completion`` after
    ``prompt`` (input ``tokens[:-1]``, targets ``tokens[1:]``)."""
    tokens = prompt + completion
    n = len(tokens) - 1
    extra.setdefault("logprobs", [0.0] * n)
    extra.setdefault("advantages", [0.0] * n)
    return rl(ts, tokens[:-1], targets=tokens[1:], **extra)


def output(fb: Any, key: str) -> list[list[float]]:
    """``loss_fn_outputs[i][key]`` of every datum, as float lists."""
    outs = fb.loss_fn_outputs or []
    return [[float(x) for x in out[key]["data"]] for out in outs]


def logprobs(fb: Any) -> list[list[float]]:
    return output(fb, "logprobs")


def clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def token_loss(
    loss_fn: str, lp: float, w: float, q: float, a: float, lo: float, hi: float
) -> float:
    """ℓ of one position (docs/semantics.md#1), recomputed independently."""
    if loss_fn == "cross_entropy":
        return -w * lp
    r = math.exp(lp - q)
    if loss_fn == "importance_sampling":
        return -w * r * a
    if loss_fn == "ppo":
        return -w * min(r * a, clip(r, lo, hi) * a)
    if loss_fn == "cispo":
        return -w * clip(r, lo, hi) * a * lp
    raise ValueError(loss_fn)


def params(backend: Backend, ts: Any, length: int = 6, **kwargs: Any) -> Any:
    """SamplingParams for a short generation: ``max_tokens=length`` where the backend allows,
    else its minimum, kept short with printable single-character stop strings."""
    if backend.limits.min_max_tokens > length and "stop" not in kwargs:
        kwargs["stop"] = PRINTABLE_STOPS
    return ts.SamplingParams(max_tokens=max(length, backend.limits.min_max_tokens), **kwargs)


def mse(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / max(1, len(a))


def max_abs(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


def adam(ts: Any, backend: Backend, **kwargs: Any) -> Any:
    kwargs.setdefault("learning_rate", backend.limits.learning_rate)
    return ts.AdamParams(**kwargs)


def train_steps(tc: Any, ts: Any, backend: Backend, steps: int = 1, batch: Any = None) -> None:
    """``steps`` cross-entropy updates on ``batch`` (default: TEXT_A), waited for."""
    batch = batch if batch is not None else [sft(ts, TEXT_A)]
    for _ in range(steps):
        tc.forward_backward(batch, "cross_entropy")
        result(tc.optim_step(adam(ts, backend)), backend)
