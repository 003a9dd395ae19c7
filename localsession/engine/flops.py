"""Throughput metrics of a training pass: ``estimated_flops``, ``promised_flops``, ``mfu``.

The names are the SDK's (``ForwardBackwardOutput.metrics``); units are FLOPs and FLOP/s.

- ``estimated_flops``: the pass's model FLOPs, from the parameter count and the tokens
  processed, by the usual dense-transformer count: ``2·N`` per token for the matmuls of the
  ``N`` non-embedding parameters (the LM head included), plus ``4·L·d·s`` per token of a
  length-``s`` sequence for attention scores and values (``L`` layers, width ``d``); a
  backward pass costs twice the forward, so ``forward_backward`` counts three forwards.
- ``promised_flops``: the device's peak FLOP/s for the engine's dtype: from a table of known
  GPUs (dense bf16 tensor-core peak), else measured once per process as the best of a few
  large matmuls in that dtype on that device.
- ``mfu``: ``estimated_flops / (promised_flops × elapsed seconds)`` of the pass's compute,
  in (0, 1] (capped at 1: a measured peak is a lower bound on the true one).

The SDK folds a chunked batch's values of these by a datum-weighted mean (it knows only
``global_token_num`` as a count), so after its fold they describe an average chunk.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from localsession import vocab

#: Dense bf16 tensor-core peaks, TFLOP/s, by a substring of ``torch.cuda.get_device_name``.
KNOWN_PEAKS_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("H800", 989.0),
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 70.0),
)
_MEASURE_SIZE = {"cpu": 1024, "cuda": 4096}
_peaks: dict[tuple[torch.device, torch.dtype], float] = {}
_peaks_lock = threading.Lock()


def model_flops(
    nonembedding_params: int, layers: int, width: int, lengths: list[int], *, backward: bool
) -> float:
    """FLOPs of one pass over sequences of ``lengths`` tokens (module docstring)."""
    tokens = sum(lengths)
    forward = 2.0 * nonembedding_params * tokens + 4.0 * layers * width * sum(
        n * n for n in lengths
    )
    return 3.0 * forward if backward else forward


def count_params(model: Any) -> tuple[int, int, int]:
    """(non-embedding parameters incl. the LM head, layers, width) of a causal LM (peft or
    plain). The adapter's own parameters are left out: they are a rounding error."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding = base.get_input_embeddings().weight
    output = base.get_output_embeddings()
    total = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
    head_tied = output is not None and output.weight is embedding
    params = total - embedding.numel() + (embedding.numel() if head_tied else 0)
    config = base.config
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    width = int(getattr(config, "hidden_size", 0) or 0)
    return int(params), layers, width


def peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """The device's peak FLOP/s for ``dtype`` (table, else measured once and cached)."""
    key = (device, dtype)
    cached = _peaks.get(key)  # every op asks: no lock once measured
    if cached is not None:
        return cached
    with _peaks_lock:
        if key in _peaks:
            return _peaks[key]
        peak = None
        if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
            name = torch.cuda.get_device_name(device)
            tflops = next((v for sub, v in KNOWN_PEAKS_TFLOPS if sub in name), None)
            peak = tflops * 1e12 if tflops is not None else None
        if peak is None:
            peak = _measure(device, dtype)
        _peaks[key] = peak
        return peak


def _measure(device: torch.device, dtype: torch.dtype) -> float:
    """Best FLOP/s of a few ``n×n @ n×n`` matmuls (one warm-up)."""
    n = _MEASURE_SIZE.get(device.type, 1024)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    best = float("inf")
    for i in range(4):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:  # the first run warms up
            best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / max(best, 1e-9)


def throughput_metrics(flops: float, seconds: float, peak: float) -> dict[str, float]:
    """``estimated_flops`` (FLOPs), ``promised_flops`` (FLOP/s) and ``mfu`` for one pass
    of ``flops`` that computed for ``seconds``."""
    return {
        vocab.Metric.ESTIMATED_FLOPS: flops,
        vocab.Metric.PROMISED_FLOPS: peak,
        vocab.Metric.MFU: min(1.0, flops / (peak * max(seconds, 1e-9))) if peak > 0 else 0.0,
    }
