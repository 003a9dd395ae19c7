"""``cross_entropy`` over 2-D ``(N, K)`` targets: Tinker's top-K distillation loss.

A datum whose ``target_tokens`` (and ``weights``) have shape ``(N, K)`` asks for the model's
log-probability of K candidate tokens at each of its N positions, and its loss is
``-sum_{t,k} w[t,k] * log p(x[t,k] | tokens[:t+1])``. That is exactly the sum of K
ordinary cross-entropy datums over the same ``model_input``, datum k taking column k of the
targets and weights. So the dialect sends the runtime those K datums (:func:`expand`), and
gathers their per-token outputs back into ``(N, K)`` tensors, row-major, in the request's
datum order (:func:`regroup`). The loss, its gradient and every logprob equal the 2-D
computation's; the runtime's ``global_token_num`` counts the K copies.

The SDK's ``forward_backward_custom`` sends the same shapes (its forward for logprobs, then
a cross-entropy backward with weights ``-dC/dlogprob``), so it takes the same path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from localsession import vocab
from localsession.port import TrainingDatum
from localsession.port_results import DatumOutput
from localsession.runtime import errors

#: The keys whose 2-D form means K candidates per position.
WIDE_KEYS = ("target_tokens", "weights")


@dataclass(frozen=True)
class Group:
    """Where one request datum's runtime datums are: ``count`` of them from ``start``;
    ``width`` is K for a 2-D datum, 0 for an ordinary one."""

    start: int
    count: int
    width: int


def expand(
    loss_fn: str, datums: list[TrainingDatum], shapes: list[dict[str, list[int]]]
) -> tuple[list[TrainingDatum], list[Group]]:
    """The runtime datums for the request's ``datums`` (``shapes``: each one's loss input
    shapes), and where each one's went. Datums without a 2-D target pass through."""
    out: list[TrainingDatum] = []
    groups: list[Group] = []
    widths: set[int] = set()
    for index, (datum, shape_of) in enumerate(zip(datums, shapes, strict=True)):
        inputs = datum.loss_fn_inputs
        shape = shape_of.get("target_tokens") or [0]
        if "target_tokens" not in inputs or len(shape) < 2:
            groups.append(Group(len(out), 1, 0))
            out.append(datum)
            widths.add(0)
            continue
        where = f"datum {index}"
        if loss_fn != vocab.LossFunction.CROSS_ENTROPY:
            raise errors.validation(
                f"{where}: target_tokens has shape {shape}; 2-D (N, K) targets are "
                f"{vocab.LossFunction.CROSS_ENTROPY}'s top-K form, loss_fn {loss_fn!r} takes "
                "shape (N,)"
            )
        if len(shape) != 2:
            raise errors.validation(
                f"{where}: target_tokens has shape {shape}; give (N,) or (N, K)"
            )
        n, k = shape
        given = len(inputs["target_tokens"])
        if n < 0 or k < 0 or given != n * k:  # before any (n, k)-sized list is made
            raise errors.validation(
                f"{where}: target_tokens has shape {shape} but holds {given} values"
            )
        weights = inputs.get("weights")
        weight_shape = shape_of.get("weights") or [n, k]
        if weights is None:
            weights = [1.0] * (n * k)
        if weight_shape != [n, k]:
            raise errors.validation(
                f"{where}: weights has shape {weight_shape}, target_tokens {shape}: "
                "give 2-D weights of the targets' shape"
            )
        extra = sorted(set(inputs) - set(WIDE_KEYS))
        if extra:
            raise errors.validation(
                f"{where}: 2-D {vocab.LossFunction.CROSS_ENTROPY} takes target_tokens and "
                "weights only, not " + ", ".join(extra)
            )
        groups.append(Group(len(out), k, k))
        widths.add(k)
        for column in range(k):
            one = {
                "target_tokens": _column(inputs["target_tokens"], n, k, column),
                "weights": _column(weights, n, k, column),
            }
            out.append(replace(datum, loss_fn_inputs=one))
    if len(widths) > 1:
        raise errors.validation(
            "the datums' target_tokens mix shapes (N,) and (N, K), or several K: one request "
            "returns one output layout, so send each shape in its own forward_backward"
        )
    return out, groups


def _column(data: list[Any], n: int, k: int, column: int) -> list[Any]:
    if len(data) != n * k:
        raise errors.validation(f"a ({n}, {k}) tensor holds {len(data)} values, not {n * k}")
    return data[column::k]


def wide(groups: list[Group]) -> bool:
    """Whether any datum was expanded (else the runtime's outputs are the request's)."""
    return any(g.width for g in groups)


def width(groups: list[Group]) -> int:
    """K of the request's 2-D datums (``expand`` allows one K per request); 0 if none."""
    return max((g.width for g in groups), default=0)


def regroup(outputs: list[DatumOutput], groups: list[Group]) -> list[DatumOutput]:
    """The runtime's per-datum outputs folded back into one per request datum: a 2-D
    datum's ``logprobs`` and ``elementwise_loss`` as ``(N, K)``, row-major; its one-value
    diagnostics are the first column's."""
    folded: list[DatumOutput] = []
    for group in groups:
        parts = outputs[group.start : group.start + group.count]
        if not group.width:
            folded.append(parts[0])
            continue
        folded.append(
            DatumOutput(
                _interleave([p.logprobs for p in parts]),
                _interleave([p.elementwise_loss for p in parts]),
                dict(parts[0].extra),
            )
        )
    return folded


def _interleave(columns: list[list[float]]) -> list[float]:
    """K columns of N values -> N rows of K values, row-major."""
    n = len(columns[0])
    return [columns[k][t] for t in range(n) for k in range(len(columns))]
