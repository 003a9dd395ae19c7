"""Continuous batching helpers for the sampler: the running batch's state, and joining
new rows to its KV cache.

A request that arrives while a batch decodes is prefilled on its own, then joins the running
batch (``BatchSampler.run``'s ``admit``). Both caches end at the newest position, so the
shorter one is left-padded with zeros to the longer one's length and those positions are
masked out (attention mask 0), exactly as left-padded prompts are. Only a plain
full-attention ``DynamicCache`` (keys/values [S, H, L, D] per layer) can be joined this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from localsession.engine.streams import SampledStream


@dataclass
class Live:
    """The running batch: its rows and their per-row tensors (S = rows)."""

    rows: list[SampledStream]
    cache: Any
    logits_SV: Tensor
    mask_SL: Tensor
    last_S: Tensor
    temp_S: Tensor
    k_S: Tensor
    p_S: Tensor


def joinable(cache: Any) -> bool:
    """Whether rows can join ``cache``: a transformers ``DynamicCache`` whose layers are all
    plain full-attention ``DynamicLayer`` s or our ``RoomyLayer`` s (keys/values [S, H, L, D])."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        from localsession.engine.kv_room import RoomyLayer
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    layers: Any = getattr(cache, "layers", None)
    plain = (DynamicLayer, RoomyLayer)
    return (
        type(cache) is DynamicCache
        and bool(layers)
        and all(type(layer) in plain and layer.keys is not None for layer in layers)
    )


def pad_left(x: Tensor, width: int, dim: int = -1) -> Tensor:
    """``x`` zero-padded at the start of ``dim`` to ``width``."""
    missing = width - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)
