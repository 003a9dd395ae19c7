"""Any differentiable loss over token log-probabilities, through public training ops only.

The service trains with four built-in losses. A loss they do not cover (DPO, a KL-penalised
objective, a per-sequence normalisation) still trains exactly, because every such loss
depends on the weights only through the per-token log-probabilities ``lp``:

1. ``forward`` with ``cross_entropy`` returns the current ``lp`` of every datum;
2. the user's loss ``L(lp)`` is evaluated in torch and differentiated: ``g = dL/dlp``;
3. ``forward_backward`` with ``cross_entropy`` and ``weights = -g`` accumulates the gradient
   of the surrogate ``Σ -w·lp = Σ g·lp``, which is ``Σ g · dlp/dθ = dL/dθ`` (chain rule).

Only public ``TrainingClient`` methods are used (``forward``, ``forward_backward``,
``get_tokenizer``), with batches as wire datum dicts, which the real SDK passes through
unchanged, so the same call works against ``sagemaker.train.training_session`` and the real
service. The ``temperature`` input, when a datum has one, goes to both passes, so ``lp`` is
the tempered log-probability the loss saw. The two ops run back to back: do not submit other
training ops from another thread in between.

``loss_fn(datums, logprobs)`` receives the caller's datums unchanged and one float32 tensor
per datum (``[T_i]``, requires grad) and returns a scalar tensor, or ``(scalar, metrics)``.
torch is imported when the function is called, not when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from localsession import vocab
from localsession.client._inputs import batch_to_datum_list

if TYPE_CHECKING:
    import torch

LossResult = Union["torch.Tensor", tuple["torch.Tensor", dict[str, float]]]
CustomLossFn = Callable[[Any, list["torch.Tensor"]], LossResult]

#: Inputs that change ``lp`` and so must reach both passes; the rest are the loss's business.
_PASS_THROUGH = ("temperature",)


@dataclass
class CustomLossOutput:
    """What ``forward_backward_custom`` returns once the gradient is accumulated."""

    #: The user's loss value ``L``.
    loss: float
    #: The surrogate pass's metrics (``global_token_num``, ...), with ``loss`` set to the
    #: user's value, ``surrogate_loss`` holding Σ g·lp, and the user's own metrics merged in.
    metrics: dict[str, float] = field(default_factory=dict)
    #: Per datum, the current log-probabilities ``lp`` as plain lists (from the forward pass).
    logprobs: list[list[float]] = field(default_factory=list)
    #: The surrogate ``forward_backward`` result as returned by the client.
    surrogate: Any = None


def _flat(values: Any) -> list[Any]:
    """A TensorData dict / object, tensor or (nested) list as a flat list."""
    data: Any = values.get("data") if isinstance(values, dict) else getattr(values, "data", values)
    if hasattr(data, "tolist"):
        data = data.tolist()
    if not isinstance(data, list):
        raise TypeError(f"expected a list of numbers, got {type(data).__name__}")
    out: list[Any] = []
    for item in data:
        out.extend(_flat(item) if isinstance(item, list) else [item])
    return out


def _tensor_data(values: list[Any], dtype: str) -> dict[str, Any]:
    return {"data": values, "dtype": dtype, "shape": [len(values)]}


def _pass_datums(wire: list[dict[str, Any]], weights: list[list[float]]) -> list[dict[str, Any]]:
    """Wire datums for one cross_entropy pass: same tokens and targets, these weights."""
    out = []
    for i, (datum, w) in enumerate(zip(wire, weights, strict=True)):
        inputs = datum.get("lossFnInputs") or {}
        if "target_tokens" not in inputs:
            raise ValueError(
                f"datum {i}: `target_tokens` is missing; forward_backward_custom needs it to "
                "know which token's log-probability each position scores"
            )
        targets = [int(t) for t in _flat(inputs["target_tokens"])]
        loss_inputs = {
            "target_tokens": _tensor_data(targets, "int64"),
            "weights": _tensor_data(w, "float32"),
        }
        for key in _PASS_THROUGH:
            if key in inputs:
                loss_inputs[key] = _tensor_data([float(v) for v in _flat(inputs[key])], "float32")
        out.append({"modelInput": datum["modelInput"], "lossFnInputs": loss_inputs})
    return out


def _lengths(wire: list[dict[str, Any]]) -> list[int]:
    return [sum(len(c.get("tokens", [])) for c in d["modelInput"]["chunks"]) for d in wire]


def forward_backward_custom(
    training_client: Any,
    datums: Sequence[Any],
    loss_fn: CustomLossFn,
    *,
    timeout: float | None = None,
) -> CustomLossOutput:
    """Accumulate the gradient of ``loss_fn`` on ``training_client`` (see the module doc).

    ``datums``: a batch as ``forward_backward`` takes it (``Datum`` objects or wire dicts),
    each with ``target_tokens``. Blocks until both ops finish; raises what their futures
    raise. Follow with ``optim_step`` as after any ``forward_backward``.
    """
    import torch

    wire = batch_to_datum_list(list(datums), tokenizer_loader=training_client.get_tokenizer)
    lengths = _lengths(wire)
    ones = [[1.0] * n for n in lengths]
    forward = training_client.forward(
        _pass_datums(wire, ones), vocab.LossFunction.CROSS_ENTROPY.value
    )
    outputs = forward.result(timeout=timeout).loss_fn_outputs or []
    if len(outputs) != len(wire):
        raise RuntimeError(f"forward returned {len(outputs)} outputs for {len(wire)} datums")
    logprobs = [
        torch.tensor(_flat(o["logprobs"]), dtype=torch.float32, requires_grad=True)  # [T_i]
        for o in outputs
    ]
    result = loss_fn(datums, logprobs)
    user_metrics: dict[str, float] = {}
    if isinstance(result, tuple):
        loss, user_metrics = result
    else:
        loss = result
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TypeError("loss_fn must return a scalar torch.Tensor (or (tensor, metrics))")
    grads = torch.autograd.grad(loss.reshape(()), logprobs, allow_unused=True)
    weights = [
        [0.0] * n if g is None else (-g.detach().to(torch.float32)).tolist()
        for g, n in zip(grads, lengths, strict=True)
    ]
    surrogate = training_client.forward_backward(
        _pass_datums(wire, weights), vocab.LossFunction.CROSS_ENTROPY.value
    )
    done = surrogate.result(timeout=timeout)
    metrics = {k: float(v) for k, v in dict(done.metrics).items()}
    metrics[vocab.Metric.SURROGATE_LOSS] = metrics.get(vocab.Metric.LOSS, 0.0)
    metrics.update({k: float(v) for k, v in user_metrics.items()})
    metrics[vocab.Metric.LOSS] = float(loss.detach())
    return CustomLossOutput(
        loss=float(loss.detach()),
        metrics=metrics,
        logprobs=[lp.detach().tolist() for lp in logprobs],
        surrogate=done,
    )
