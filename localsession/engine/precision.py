"""Compute dtype choice (``LOCALSESSION_DTYPE``) and the CPU's bf16 instruction sets.

- ``fp32``: float32 weights everywhere (the default on a CPU, so tests are reproducible).
- ``bf16``: bfloat16 base weights; the LoRA adapter, its gradients and the AdamW moments stay
  float32 (peft keeps adapter weights in float32 over a half-precision base and casts
  activations at the adapter's boundary), so updates are not rounded away.
- ``auto``: bf16 on CUDA, and on a CPU that has AMX-BF16 or AVX-512 BF16; fp32 otherwise.

Unset, a CUDA device keeps its historical bfloat16 and a CPU float32. Detection reads the
``flags`` line of ``/proc/cpuinfo`` (Linux); elsewhere no bf16 instructions are assumed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

DTYPE_ENV = "LOCALSESSION_DTYPE"
CHOICES = ("fp32", "bf16", "auto")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty where ``/proc/cpuinfo`` is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_bf16_isa() -> str | None:
    """``"amx_bf16"``, ``"avx512_bf16"`` (the better one first), or ``None``."""
    flags = cpu_flags()
    for isa in ("amx_bf16", "avx512_bf16"):
        if isa in flags:
            return isa
    return None


def pick_dtype(device: torch.device, default: torch.dtype, choice: str = "default") -> torch.dtype:
    """The weights' dtype on ``device`` for ``choice`` (``EngineOptions.dtype``): ``fp32``,
    ``bf16``, ``auto`` (bf16 on CUDA or a CPU with bf16 instructions) or ``default``."""
    if choice == "default":
        return default
    if choice == "fp32":
        return torch.float32
    if choice == "bf16":
        return torch.bfloat16
    if device.type == "cuda" or cpu_bf16_isa() is not None:
        return torch.bfloat16
    return torch.float32
