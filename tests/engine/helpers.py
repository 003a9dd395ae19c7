"""Helpers shared by the engine tests: datums (the port's values), random token lists, and
a few fixed training steps and greedy samples to compare two engines by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams, SampleRequest, TrainingDatum
from localsession.port_results import DatumOutput


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


def output_keys(output: DatumOutput) -> set[str]:
    """The names of a datum's outputs: its per-token rows and its diagnostics."""
    return {"logprobs", "elementwise_loss", *output.extra}


def output_row(output: DatumOutput, key: str) -> list[float]:
    """One named output of a datum as a list (a diagnostic is a one-value list)."""
    if key in ("logprobs", "elementwise_loss"):
        return list(getattr(output, key))
    return [output.extra[key]]


def outputs_without(outputs: list[DatumOutput], *drop: str) -> list[dict[str, list[float]]]:
    """Per-datum loss outputs, by name, without the keys ``drop``."""
    return [{k: output_row(o, k) for k in sorted(output_keys(o)) if k not in drop} for o in outputs]


def random_tokens(n: int, length: int, seed: int, vary: bool = True) -> list[list[int]]:
    """``n`` token lists of byte ids (lengths vary from ``length // 2`` when ``vary``)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        size = length - (i * 7) % max(1, length // 2) if vary else length
        out.append(torch.randint(0, 256, (size,), generator=gen).tolist())
    return out


ADAM = AdamHyperparams(learning_rate=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)


def grads(engine: TorchEngine) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}


def train(engine: TorchEngine, steps: int) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    """``steps`` cross-entropy steps on fixed data: each step's loss and gradients."""
    datums = [make_datum(t) for t in random_tokens(3, 24, seed=5)]
    losses, gradients = [], []
    for _ in range(steps):
        out = engine.forward_backward(datums, "cross_entropy", None, backward=True)
        losses.append(float(out.metrics["loss"]))
        gradients.append(grads(engine))
        engine.optim_step(ADAM)
    return losses, gradients


def greedy(
    engine: TorchEngine, tmp_path: Path, name: str, prompt: list[int] | None = None
) -> list[int]:
    """Greedy tokens (16) after ``prompt`` from a saved snapshot of ``engine``'s adapter."""
    directory = tmp_path / name
    engine.save_package(str(directory), include_optimizer=False, merge_weights=False)
    tokens = prompt if prompt is not None else [257, 72, 101]
    request = SampleRequest(prompt=tokens, max_tokens=16, temperature=0.0, seed=0)
    (out,) = engine.sample(str(directory), [request])
    return list(out.sequences[0].tokens)
