"""Helpers shared by the engine tests: datums (the port's values) and random token lists."""

from __future__ import annotations

from typing import Any

import torch

from localsession.port import TrainingDatum


def tensor_data(values: list[Any], dtype: str = "float32") -> dict[str, Any]:
    """Wire TensorData for a flat list."""
    return {"data": list(values), "dtype": dtype, "shape": [len(values)]}


def wire_datum(tokens: list[int], **inputs: list[Any]) -> dict[str, Any]:
    """The same datum as :func:`make_datum` in wire form (for the SDK's own helpers)."""
    datum = make_datum(tokens, **inputs)
    return {
        "modelInput": {"chunks": [{"tokens": datum.tokens, "type": "encoded_text"}]},
        "lossFnInputs": {
            key: tensor_data(values, "int64" if key == "target_tokens" else "float32")
            for key, values in datum.loss_fn_inputs.items()
        },
    }


def make_datum(tokens: list[int], **inputs: list[Any]) -> TrainingDatum:
    """A datum as the runtime hands it to an engine; ``target_tokens`` defaults to
    ``tokens[1:] + [0]`` and weights to 1."""
    inputs.setdefault("target_tokens", tokens[1:] + [0])
    inputs.setdefault("weights", [1.0] * len(tokens))
    return TrainingDatum(list(tokens), {key: list(values) for key, values in inputs.items()})


#: Metrics that time the op (engine/flops.py): they differ between two runs of one batch.
TIMED_METRICS = frozenset({"estimated_flops", "mfu"})


def untimed(metrics: dict[str, float], *drop: str) -> dict[str, float]:
    """``metrics`` without the timed ones (and without ``drop``)."""
    return {k: v for k, v in metrics.items() if k not in TIMED_METRICS and k not in drop}


def outputs_without(outputs: list[dict[str, Any]], *drop: str) -> list[dict[str, Any]]:
    """Per-datum loss outputs without the keys ``drop``."""
    return [{k: v for k, v in o.items() if k not in drop} for o in outputs]


def random_tokens(n: int, length: int, seed: int, vary: bool = True) -> list[list[int]]:
    """``n`` token lists of byte ids (lengths vary from ``length // 2`` when ``vary``)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        size = length - (i * 7) % max(1, length // 2) if vary else length
        out.append(torch.randint(0, 256, (size,), generator=gen).tolist())
    return out
