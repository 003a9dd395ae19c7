"""Helpers of the Tinker-surface suite: datums, waiting within the backend's op timeout,
one SFT step, comparisons that are exact where the backend promises bit-exactness, the
SDK-release gate and the error-category check.

Docs cited by the tests: "losses.mdx" is the Tinker documentation's "Loss functions in
Tinker" page (the formulas as code); everything else is a docstring or type of the tinker
SDK itself (``tinker/types/...``, ``tinker/lib/public_interfaces/...``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat


def wait(pending: Any, backend: Backend) -> Any:
    """``future.result()`` within the backend's op timeout (older SDK releases answer some
    calls, ``create_sampling_client`` among them, with the client itself)."""
    if not hasattr(pending, "result"):
        return pending
    return pending.result(timeout=backend.limits.op_timeout_s)


def needs_sdk(backend: Backend, *features: str) -> None:
    """Skip, naming the installed SDK release and the one that added each missing feature,
    when it cannot send every feature (tinker_compat)."""
    missing = [f for f in features if not compat.supports(backend.ts, f)]
    if missing:
        pytest.skip(compat.missing_reason(compat.sdk_version(), missing))


def text_tokens(backend: Backend) -> list[int]:
    """The prompt followed by its continuation, in the model's own tokens."""
    from conformance.backends.tinker import CONTINUATION_TEXT

    if backend.encode is None:  # byte-level ids, valid for any vocabulary above 260
        return [*backend.prompt, *CONTINUATION_TEXT[:12].encode()]
    return [*backend.prompt, *backend.encode(CONTINUATION_TEXT)]


def datum(backend: Backend, tokens: Sequence[int], **inputs: Any) -> Any:
    """Next-token prediction over ``tokens``; ``inputs`` add per-position loss inputs
    (weights default to 1 everywhere; pass ``weights=None`` for none)."""
    types = backend.ts.types
    inputs.setdefault("weights", [1.0] * (len(tokens) - 1))
    given = {key: value for key, value in inputs.items() if value is not None}
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={"target_tokens": list(tokens[1:]), **given},
    )


def forward(
    backend: Backend, trainer: Any, data: list[Any], loss_fn: str = "cross_entropy", **kw: Any
) -> Any:
    """``trainer.forward(data, loss_fn, loss_fn_config)``, waited for."""
    return wait(trainer.forward(data, loss_fn, kw.get("config")), backend)


def logprobs_of(backend: Backend, trainer: Any, tokens: Sequence[int]) -> list[float]:
    """The trainer's per-target logprobs of ``tokens`` (a cross-entropy forward)."""
    out = forward(backend, trainer, [datum(backend, tokens)])
    return [float(v) for v in out.loss_fn_outputs[0]["logprobs"].tolist()]


def loss_of(backend: Backend, trainer: Any, tokens: Sequence[int]) -> float:
    """``loss:sum`` of a cross-entropy forward over ``tokens`` (no gradient)."""
    return float(forward(backend, trainer, [datum(backend, tokens)]).metrics["loss:sum"])


def adam(backend: Backend, **kw: Any) -> Any:
    """The suite's ``AdamParams`` (the backend's learning rate unless given)."""
    kw.setdefault("learning_rate", backend.limits.learning_rate)
    return backend.ts.types.AdamParams(**kw)


def step(backend: Backend, trainer: Any, tokens: Sequence[int]) -> float:
    """One SFT step (forward_backward, optim_step); returns its forward_backward loss."""
    fb = trainer.forward_backward([datum(backend, tokens)], "cross_entropy")
    opt = trainer.optim_step(adam(backend))
    loss = float(wait(fb, backend).metrics["loss:sum"])
    wait(opt, backend)
    return loss


def close(a: float, b: float, exact: bool, rel: float = 1e-4) -> bool:
    """``a == b`` when the backend promises bit-exactness, else within ``rel``."""
    return a == b if exact else a == pytest.approx(b, rel=rel, abs=1e-6)


def approx_loss(backend: Backend, expected: float) -> Any:
    """``pytest.approx`` at the backend's loss tolerance."""
    return pytest.approx(expected, rel=backend.limits.loss_rtol, abs=1e-5)


def fsum(values: Any) -> float:
    return math.fsum(float(v) for v in values)


def user_error(backend: Backend, call: Callable[[], Any], *names: str) -> str:
    """Run ``call``, which must fail as the caller's fault, and return the message.

    The SDK raises a refusal at submit as an ``APIStatusError`` (``BadRequestError`` and the
    other 4xx classes: tinker/_exceptions.py) and a request that fails after it was accepted
    as a ``RequestFailedError`` whose ``category`` is a ``RequestErrorCategory``
    (``User``/``Server``/``Unknown``: tinker/types/request_error_category.py). A user error is
    a 4xx or category ``User``; a 5xx, ``Server`` or ``Unknown`` is the server's fault and
    fails the test, whatever its message. The message must name each of ``names`` (the
    input at fault): a crash whose text happens to say "size" or "match" does not pass."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - classified below
        wait(call(), backend)
    exc = info.value
    status = compat.status_of(exc)
    category = getattr(exc, "category", None)
    kind = type(exc).__name__
    if status is not None:
        assert 400 <= status < 500, f"HTTP {status} ({kind}) is a server fault, not a refusal"
    else:
        assert kind == "RequestFailedError", f"{kind} is neither a 4xx nor a failed request"
        assert str(category).lower().endswith("user"), (
            f"the failure's category is {category!r}, not User: {exc}"
        )
    body = compat.body_of(exc)
    message = str(body.get("detail", body) if isinstance(body, dict) and body else exc)
    for name in names:
        assert name in message, f"the refusal does not name {name!r}: {message[:400]}"
    return message
