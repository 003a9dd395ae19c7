"""Tinker's ``dro`` loss over the runtime's ops (numerics/dro_loss.py has the formula).

DRO's gradient at the current weights is a ``cross_entropy`` backward whose per-token
weights are ``w * (A - beta * (lp - q))``, and those need ``lp``. So one Tinker
``forward_backward(loss_fn="dro")`` becomes two runtime ops on consecutive sequence
numbers: a ``forward`` for ``lp``, then, the moment it finishes (on a thread of its own),
that ``forwardBackward``. The model's sequence offset grows by one, so the client's later
ops keep their order and nothing waits on a gap. A ``forward(loss_fn="dro")`` is the
forward alone. Either way the outputs' ``elementwise_loss`` (and so ``loss:sum``) is DRO's
and ``logprobs`` is ``lp``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from localsession import vocab
from localsession.numerics.dro_loss import DEFAULT_BETA, dro_backward_weights, dro_loss
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError

if TYPE_CHECKING:  # the dialect's types, named without importing it (dialect.py imports us)
    Dialect = Any
    Future = Any
    Model = Any


@dataclass(frozen=True)
class DroInputs:
    """What the results need: each datum's sampler logprobs, advantages and weights."""

    beta: float
    q: list[list[float]]
    advantages: list[list[float]]
    weights: list[list[float]]


def _column(inputs: dict[str, Any], key: str, n: int, where: str) -> list[float]:
    tensor = inputs.get(key)
    if not isinstance(tensor, dict):
        raise errors.validation(f"{where}: loss_fn 'dro' needs `{key}` (one value per target)")
    data = tensor.get("data") or []
    if len(data) != n or len(tensor.get("shape") or [n]) != 1:
        raise errors.validation(f"{where}: `{key}` has {len(data)} values, target_tokens {n}")
    values = [float(v) for v in data]
    if not all(math.isfinite(v) for v in values):
        raise errors.validation(f"{where}: `{key}` holds a non-finite value")
    return values


def parse(config: dict[str, Any], datums: list[dict[str, Any]]) -> tuple[DroInputs, list[Any]]:
    """The checked DRO inputs and the ``cross_entropy`` datums of the forward."""
    unknown = sorted(set(config) - {"beta"})
    if unknown:
        raise errors.validation(f"loss_fn 'dro' takes loss_fn_config beta only, not {unknown}")
    beta = float(config.get("beta", DEFAULT_BETA))
    if not math.isfinite(beta) or beta < 0:
        raise errors.validation(f"loss_fn_config beta={beta} must be a finite number >= 0")
    inputs = DroInputs(beta, [], [], [])
    forward: list[dict[str, Any]] = []
    for i, datum in enumerate(datums):
        where, given = f"datum {i}", datum.get("lossFnInputs") or {}
        extra = sorted(set(given) - {"target_tokens", "logprobs", "advantages", "weights"})
        if extra:
            raise errors.validation(f"{where}: loss_fn 'dro' does not take {', '.join(extra)}")
        target = given.get("target_tokens")
        if not isinstance(target, dict) or len(target.get("shape") or [0]) != 1:
            raise errors.validation(f"{where}: loss_fn 'dro' needs 1-D `target_tokens`")
        n = len(target.get("data") or [])
        inputs.q.append(_column(given, "logprobs", n, where))
        inputs.advantages.append(_column(given, "advantages", n, where))
        w = _column(given, "weights", n, where) if "weights" in given else [1.0] * n
        inputs.weights.append(w)
        forward.append(
            {
                **{k: v for k, v in datum.items() if k != "lossFnInputs"},
                "lossFnInputs": {
                    "target_tokens": target,
                    "weights": {"data": w, "dtype": "float32", "shape": [n]},
                },
            }
        )
    return inputs, forward


def submit(
    dialect: Dialect,
    model: Model,
    seq_id: int,
    config: dict[str, Any],
    forward_only: bool,
    datums: list[dict[str, Any]],
    pending: Future,
) -> Future:
    """Queue a ``dro`` request into ``pending`` (a new dialect Future): its op is the forward
    (``forward_only``) or, once that ran, the backward (``pending.op_id`` is None until then)."""
    inputs, forward = parse(config, datums)
    body = {"lossFnName": "cross_entropy", "datumList": forward}
    first = dialect.submit(model, seq_id, "forward", body)
    pending.session, pending.extra = model.session, {"dro": inputs}
    if forward_only:
        pending.kind, pending.op_id = "forward", first
        return pending
    with dialect.lock:
        model.offset += 1  # the backward takes the next number; later ops shift by one
    pending.kind = "forwardBackward"
    pending.extra["ready"] = threading.Event()
    threading.Thread(
        target=_backward,
        args=(dialect, model, seq_id, first, forward, pending),
        name="localsession-tinker-dro",
        daemon=True,
    ).start()
    return pending


def _backward(
    dialect: Dialect,
    model: Model,
    seq_id: int,
    first: str,
    forward: list[dict[str, Any]],
    future: Future,
) -> None:
    """Wait for the forward, then queue the backward on the next sequence number."""
    service, inputs = dialect.service, future.extra["dro"]
    try:
        service.wait_operation(model.session, first, None)
        result = service.get_training_operation_result(model.session, first)
        if result.get("status") != vocab.OpStatus.COMPLETED:
            detail = result.get("errorDetails") or {}
            future.error = str(detail.get("message") if isinstance(detail, dict) else detail)
            body = {"lossFnName": "cross_entropy", "datumList": forward}
            dialect.submit(model, seq_id, "forward", body)  # uses up the number; changes nothing
            return
        outputs = (result.get("operationResult") or {}).get("forward", {}).get("lossFnOutputs")
        datums = []
        for i, (datum, out) in enumerate(zip(forward, outputs or [], strict=True)):
            lp = [float(v) for v in out["logprobs"]["data"]]
            w = dro_backward_weights(
                lp, inputs.q[i], inputs.advantages[i], inputs.weights[i], inputs.beta
            )
            given = datum["lossFnInputs"]
            datums.append(
                {
                    **datum,
                    "lossFnInputs": {
                        "target_tokens": given["target_tokens"],
                        "weights": {"data": w, "dtype": "float32", "shape": [len(w)]},
                    },
                }
            )
        body = {"lossFnName": "cross_entropy", "datumList": datums}
        future.op_id = dialect.submit(model, seq_id, "forwardBackward", body)
    except (ServiceError, KeyError, TypeError, ValueError) as exc:
        future.error = f"the dro backward could not be queued: {exc}"
    finally:
        future.extra["ready"].set()


def wait_ready(future: Future, timeout: float) -> None:
    """Block until a dro future's backward is queued (or failed), at most ``timeout`` s."""
    ready = future.extra.get("ready")
    if isinstance(ready, threading.Event):
        ready.wait(timeout)


def outputs(found: list[dict[str, Any]], inputs: DroInputs) -> list[dict[str, Any]]:
    """The runtime's per-datum outputs with DRO's elementwise loss in place of the
    surrogate cross entropy's."""
    out = []
    for i, item in enumerate(found):
        lp = [float(v) for v in item["logprobs"]["data"]]
        loss = dro_loss(lp, inputs.q[i], inputs.advantages[i], inputs.weights[i], inputs.beta)
        out.append(
            {**item, "elementwise_loss": {"data": loss, "dtype": "float32", "shape": [len(loss)]}}
        )
    return out
