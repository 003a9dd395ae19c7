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

from dataclasses import dataclass
from typing import Any

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


def _shape(tensor: dict[str, Any]) -> list[int]:
    shape = tensor.get("shape")
    return list(shape) if shape else [len(tensor.get("data") or [])]


def expand(loss_fn: str, datums: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Group]]:
    """The runtime datums for the request's ``datums``, and where each one's went. Datums
    without a 2-D target pass through untouched."""
    out: list[dict[str, Any]] = []
    groups: list[Group] = []
    widths: set[int] = set()
    for i, datum in enumerate(datums):
        inputs = datum.get("lossFnInputs") or {}
        target = inputs.get("target_tokens")
        if not isinstance(target, dict) or len(_shape(target)) < 2:
            groups.append(Group(len(out), 1, 0))
            out.append(datum)
            widths.add(0)
            continue
        where, shape = f"datum {i}", _shape(target)
        if loss_fn != "cross_entropy":
            raise errors.validation(
                f"{where}: target_tokens has shape {shape}; 2-D (N, K) targets are "
                f"cross_entropy's top-K form, loss_fn {loss_fn!r} takes shape (N,)"
            )
        if len(shape) != 2:
            raise errors.validation(
                f"{where}: target_tokens has shape {shape}; give (N,) or (N, K)"
            )
        n, k = shape
        weights = inputs.get("weights")
        if weights is None:
            weights = {"data": [1.0] * (n * k), "dtype": "float32", "shape": [n, k]}
        if _shape(weights) != [n, k]:
            raise errors.validation(
                f"{where}: weights has shape {_shape(weights)}, target_tokens {shape}: "
                "give 2-D weights of the targets' shape"
            )
        extra = sorted(set(inputs) - set(WIDE_KEYS))
        if extra:
            raise errors.validation(
                f"{where}: 2-D cross_entropy takes target_tokens and weights only, not "
                + ", ".join(extra)
            )
        groups.append(Group(len(out), k, k))
        widths.add(k)
        for column in range(k):
            one = {key: value for key, value in datum.items() if key != "lossFnInputs"}
            one["lossFnInputs"] = {
                "target_tokens": _column(target, n, k, column, "int64"),
                "weights": _column(weights, n, k, column, "float32"),
            }
            out.append(one)
    if len(widths) > 1:
        raise errors.validation(
            "the datums' target_tokens mix shapes (N,) and (N, K), or several K: one request "
            "returns one output layout, so send each shape in its own forward_backward"
        )
    return out, groups


def _column(tensor: dict[str, Any], n: int, k: int, column: int, dtype: str) -> dict[str, Any]:
    data = tensor.get("data") or []
    if len(data) != n * k:
        raise errors.validation(f"a ({n}, {k}) tensor holds {len(data)} values, not {n * k}")
    return {"data": data[column::k], "dtype": tensor.get("dtype") or dtype, "shape": [n]}


def wide(groups: list[Group]) -> bool:
    """Whether any datum was expanded (else the runtime's outputs are the request's)."""
    return any(g.width for g in groups)


def regroup(outputs: list[dict[str, Any]], groups: list[Group]) -> list[dict[str, Any]]:
    """The runtime's per-datum outputs folded back into one per request datum: a 2-D
    datum's ``(N, K)`` ``logprobs`` and ``elementwise_loss`` (the keys all K carry)."""
    folded: list[dict[str, Any]] = []
    for group in groups:
        parts = outputs[group.start : group.start + group.count]
        if not group.width:
            folded.append(parts[0])
            continue
        keys = [key for key in parts[0] if all(key in p for p in parts)]
        merged: dict[str, Any] = {}
        for name in keys:
            columns = [p[name].get("data") or [] for p in parts]
            n = len(columns[0])
            if any(len(c) != n for c in columns):  # a one-value diagnostic: keep the first
                merged[name] = parts[0][name]
                continue
            data = [columns[k][t] for t in range(n) for k in range(group.width)]
            merged[name] = {
                "data": data,
                "dtype": parts[0][name].get("dtype") or "float32",
                "shape": [n, group.width],
            }
        folded.append(merged)
    return folded
