"""Tinker's ``dro`` loss over the runtime's ops (numerics/dro_loss.py has the formula).

DRO's gradient at the current weights is a ``cross_entropy`` backward whose per-token
weights are ``w * (A - beta * (lp - q))``, and those need ``lp``. So one Tinker
``forward_backward(loss_fn="dro")`` becomes two runtime ops on consecutive sequence
numbers: a ``forward`` for ``lp``, then, the moment it finishes (on a thread of its own),
that ``forwardBackward``. The model's sequence offset grows by one, so the client's later
ops keep their order and nothing waits on a gap. A ``forward(loss_fn="dro")`` is the
forward alone. Either way the outputs' ``elementwise_loss`` (and so ``loss:sum``) is DRO's
and ``logprobs`` is ``lp``.

The same two ops run any loss whose parameters enter only through ``lp``: ``submit`` takes
any :class:`Surrogate` (``gspo`` and ``stable_reinforce``: sequence_losses.py).
"""

from __future__ import annotations

import math
import threading
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from localsession import vocab
from localsession.numerics.dro_loss import dro_backward_weights, dro_loss
from localsession.port import EngineInputError, TrainingDatum
from localsession.port_commands import ForwardCommand
from localsession.port_results import DatumOutput, ForwardResult
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError

if TYPE_CHECKING:  # the dialect's types, named without importing it (dialect.py imports us)
    Dialect = Any
    Future = Any
    Model = Any

#: The key of a two-op future's ``extra`` that holds its :class:`Surrogate`.
INPUTS = "dro_inputs"


class Surrogate(Protocol):
    """A loss run as a forward, then a ``cross_entropy`` backward at the same weights."""

    @property
    def name(self) -> str: ...

    def weights(self, index: int, lp: list[float]) -> list[float]:
        """Datum ``index``'s cross-entropy weights at ``lp``: ``-dℓ_t/dlp_t``."""
        ...

    def loss(self, index: int, lp: list[float]) -> list[float]:
        """Datum ``index``'s elementwise loss at ``lp``."""
        ...


@dataclass(frozen=True)
class DroInputs:
    """What the results need: each datum's sampler logprobs, advantages and weights."""

    beta: float
    q: list[list[float]]
    advantages: list[list[float]]
    token_weights: list[list[float]]
    name: str = vocab.TinkerLoss.DRO

    def weights(self, index: int, lp: list[float]) -> list[float]:
        return dro_backward_weights(
            lp, self.q[index], self.advantages[index], self.token_weights[index], self.beta
        )

    def loss(self, index: int, lp: list[float]) -> list[float]:
        return dro_loss(
            lp, self.q[index], self.advantages[index], self.token_weights[index], self.beta
        )


def _column(
    inputs: dict[str, list[Any]], shapes: dict[str, list[int]], key: str, n: int, where: str
) -> list[float]:
    column = inputs.get(key)
    if column is None:
        raise errors.validation(
            f"{where}: loss_fn {vocab.TinkerLoss.DRO!r} needs `{key}` (one value per target)"
        )
    if len(column) != n or len(shapes.get(key) or [n]) != 1:
        raise errors.validation(f"{where}: `{key}` has {len(column)} values, target_tokens {n}")
    values = [float(v) for v in column]
    if not all(math.isfinite(v) for v in values):
        raise errors.validation(f"{where}: `{key}` holds a non-finite value")
    return values


def parse(
    config: dict[str, Any], datums: list[TrainingDatum], shapes: list[dict[str, list[int]]]
) -> tuple[DroInputs, list[TrainingDatum]]:
    """The checked DRO inputs and the ``cross_entropy`` datums of the forward."""
    unknown = sorted(set(config) - {"beta"})
    if unknown:
        raise errors.validation(
            f"loss_fn {vocab.TinkerLoss.DRO!r} takes loss_fn_config beta only, not {unknown}"
        )
    beta = float(config.get("beta", vocab.TINKER_DRO_BETA))
    if not math.isfinite(beta) or beta < 0:
        raise errors.validation(f"loss_fn_config beta={beta} must be a finite number >= 0")
    inputs = DroInputs(beta, [], [], [])
    forward: list[TrainingDatum] = []
    for index, (datum, shape_of) in enumerate(zip(datums, shapes, strict=True)):
        where, given = f"datum {index}", datum.loss_fn_inputs
        extra = sorted(set(given) - {"target_tokens", "logprobs", "advantages", "weights"})
        if extra:
            raise errors.validation(
                f"{where}: loss_fn {vocab.TinkerLoss.DRO!r} does not take {', '.join(extra)}"
            )
        target = given.get("target_tokens")
        if target is None or len(shape_of.get("target_tokens") or [0, 0]) != 1:
            raise errors.validation(
                f"{where}: loss_fn {vocab.TinkerLoss.DRO!r} needs 1-D `target_tokens`"
            )
        n = len(target)
        inputs.q.append(_column(given, shape_of, "logprobs", n, where))
        inputs.advantages.append(_column(given, shape_of, "advantages", n, where))
        w = _column(given, shape_of, "weights", n, where) if "weights" in given else [1.0] * n
        inputs.token_weights.append(w)
        forward.append(replace(datum, loss_fn_inputs={"target_tokens": target, "weights": w}))
    return inputs, forward


def _command(datums: list[TrainingDatum], backward: bool) -> ForwardCommand:
    return ForwardCommand(datums, vocab.LossFunction.CROSS_ENTROPY, None, backward)


def submit(
    dialect: Dialect,
    model: Model,
    number: int,
    config: dict[str, Any],
    forward_only: bool,
    datums: list[TrainingDatum],
    shapes: list[dict[str, list[int]]],
    pending: Future,
    parsed: tuple[Surrogate, list[TrainingDatum]] | None = None,
) -> Future:
    """Queue a ``dro`` request (or the ``parsed`` surrogate loss and its forward datums)
    numbered ``number`` into ``pending`` (a new dialect Future): its op is the forward
    (``forward_only``) or, once that ran, the backward on ``number + 1`` (``pending.op_id``
    is None until then)."""
    inputs, forward = parsed or parse(config, datums, shapes)
    first = dialect.numbering.submit(model, number, _command(forward, False))
    pending.session, pending.extra = model.session, {INPUTS: inputs}
    if forward_only:
        pending.kind, pending.op_id = vocab.OpKind.FORWARD, first
        return pending
    dialect.models.shift(model)  # the backward takes the next number; later ops shift by one
    pending.kind = vocab.OpKind.FORWARD_BACKWARD
    pending.extra["ready"] = threading.Event()
    threading.Thread(
        target=_backward,
        args=(dialect, model, number + 1, first, forward, pending),
        name="localsession-tinker-dro",
        daemon=True,
    ).start()
    return pending


def _backward(
    dialect: Dialect,
    model: Model,
    number: int,
    first: str,
    forward: list[TrainingDatum],
    future: Future,
) -> None:
    """Wait for the forward, then queue the backward as op ``number``."""
    service, inputs = dialect.service, future.extra[INPUTS]
    try:
        service.wait_operation(model.session, first, None)
        outcome = service.operation_outcome(model.session, first)
        if outcome.status != vocab.OpStatus.COMPLETED or not isinstance(
            outcome.result, ForwardResult
        ):
            future.error = outcome.error or f"the {inputs.name} forward ended {outcome.status}"
            service.refuse_sequence(model.session, number)  # uses up the number
            return
        datums = []
        for i, (datum, out) in enumerate(zip(forward, outcome.result.outputs, strict=True)):
            w = inputs.weights(i, [float(v) for v in out.logprobs])
            given = datum.loss_fn_inputs
            datums.append(
                replace(
                    datum, loss_fn_inputs={"target_tokens": given["target_tokens"], "weights": w}
                )
            )
        future.op_id = dialect.numbering.submit(model, number, _command(datums, True))
    except (ServiceError, EngineInputError, KeyError, TypeError, ValueError) as exc:
        future.error = f"the {inputs.name} backward could not be queued: {exc}"
        if future.op_id is None:  # its number is used up, so later ops do not wait on it
            with suppress(ServiceError):
                service.refuse_sequence(model.session, number)
    finally:
        future.extra["ready"].set()


def wait_ready(future: Future, timeout: float) -> None:
    """Block until a dro future's backward is queued (or failed), at most ``timeout`` s."""
    ready = future.extra.get("ready")
    if isinstance(ready, threading.Event):
        ready.wait(timeout)


def outputs(found: list[DatumOutput], inputs: Surrogate) -> list[DatumOutput]:
    """The runtime's per-datum outputs with the loss's elementwise values (DRO's, say) in
    place of the surrogate cross entropy's."""
    out = []
    for i, item in enumerate(found):
        loss = inputs.loss(i, [float(v) for v in item.logprobs])
        out.append(replace(item, elementwise_loss=loss))
    return out
