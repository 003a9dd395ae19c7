"""The memory-bandwidth limit of a decode step (bench/gpu_decode.py's check 7).

A decode step must read every weight once (the input embedding only at the rows it looks
up) and every stream's KV cache at its current length; :func:`decode_bytes` sums that over
the decode steps of one call, and :func:`bandwidth_fraction` divides the time those bytes
take at the card's bandwidth by the time they took. The bandwidth comes from
:data:`BANDWIDTH_GBPS` by device name (vendor data sheets), else from a timed device copy
(:func:`card_bandwidth`). tests/bench/test_gpu_decode.py checks each against a hand
computation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: Peak memory bandwidth in GB/s (10^9 bytes/s) by device-name fragment, the first match
#: wins (so the more specific names come first: "L40S" before "L4", "A100" before "A10").
BANDWIDTH_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),  # SXM5, HBM3
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),  # 40 GB
    ("B200", 8000.0),
    ("L40S", 864.0),
    ("L4", 300.0),
    ("A10G", 600.0),
    ("A10", 600.0),
    ("RTX 4090", 1008.0),
)


@dataclass(frozen=True)
class StepBytes:
    """What one decode step of a model reads: ``weights`` bytes (every weight, the input
    embedding only at the looked-up rows, which :func:`decode_bytes` adds per stream) and
    ``kv_per_token`` bytes of K and V per cached token over every layer."""

    weights: int
    kv_per_token: int
    embed_row: int  # one looked-up row of an untied input embedding (0 when tied)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """K and V of one token in every layer's cache."""
    return 2 * layers * kv_heads * head_dim * element_bytes


def decode_bytes(step: StepBytes, streams: int, prompt_len: int, new_tokens: int) -> int:
    """Bytes the decode steps of one call must read. The prefill makes token 1; decode step
    j (1 ≤ j < ``new_tokens``) feeds token j and makes token j + 1, reading every weight, one
    embedding row per stream, and each stream's cache at its current length
    ``prompt_len + j`` (the prompt, the tokens fed before, and the one it feeds)."""
    steps = new_tokens - 1
    cached = steps * prompt_len + steps * (steps + 1) // 2  # Σ_j (prompt_len + j)
    return steps * (step.weights + streams * step.embed_row) + streams * step.kv_per_token * cached


def bandwidth_fraction(nbytes: int, bandwidth: float, seconds: float) -> float:
    """The share of the bandwidth limit reached: the time ``nbytes`` take at ``bandwidth``
    bytes/s over the time they took."""
    return nbytes / bandwidth / seconds


def table_bandwidth(device_name: str) -> float | None:
    """The card's bandwidth in bytes/s from :data:`BANDWIDTH_GBPS`, or None."""
    return next((gbps * 1e9 for key, gbps in BANDWIDTH_GBPS if key in device_name), None)


# -- measuring -----------------------------------------------------------------------------


def copy_bandwidth(accel: str, mib: int) -> float:
    """Bytes/s of a timed device-to-device copy of ``mib`` MiB (it reads and writes each
    byte: 2 × size per copy), the best of 5."""
    import torch

    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=accel)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        sync(accel)
        started = time.perf_counter()
        dst.copy_(src)
        sync(accel)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() / best


def card_bandwidth(accel: str, device_name: str) -> tuple[float, str]:
    """(bytes/s, where the figure came from): the table, else a measured copy."""
    found = table_bandwidth(device_name)
    if found is not None:
        return found, "data sheet"
    return copy_bandwidth(accel, 1024 if accel == "cuda" else 64), "measured copy"


def step_bytes(twin: Any, config: Any) -> StepBytes:
    """:class:`StepBytes` of ``twin`` (its parameters' own sizes)."""
    embed = twin.get_input_embeddings().weight
    tied = embed is twin.get_output_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in twin.parameters())
    embed_bytes = 0 if tied else embed.numel() * embed.element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = kv_bytes_per_token(
        config.num_hidden_layers, config.num_key_value_heads, head_dim, embed.element_size()
    )
    row = 0 if tied else embed.shape[1] * embed.element_size()
    return StepBytes(total - embed_bytes, kv, row)


def sync(accel: str) -> None:
    """Wait for ``accel``'s queued work (a no-op off CUDA)."""
    import torch

    if accel == "cuda":
        torch.cuda.synchronize()
