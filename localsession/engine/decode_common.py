"""What both decode loops share (``sampling.py``'s dynamic loop and ``static_decoder.py``):
the compaction threshold, the step hooks tests use to hold a decoder between steps, and how
a model names its KV-cache argument. A leaf: it imports neither loop."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

#: Finished streams stay in the batch (their outputs ignored) until this fraction of rows
#: is finished; then the KV cache is compacted once, instead of once per finished stream.
COMPACT_FRACTION = 0.25

#: Functions run after every decode step with the number of steps done (``add_step_hook``).
STEP_HOOKS: list[Callable[[int], None]] = []


def add_step_hook(hook: Callable[[int], None]) -> Callable[[], None]:
    """Run ``hook(steps_done)`` after each decode step of every batch (a test seam: a hook
    that blocks holds the decoder there). Returns a function that removes it."""
    STEP_HOOKS.append(hook)
    return lambda: STEP_HOOKS.remove(hook)


def forward_kwargs(model: torch.nn.Module) -> tuple[str, bool]:
    """(name of the KV-cache kwarg, whether ``logits_to_keep`` is accepted) for a model."""
    base: Any = model
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        base = get_base()
    params = inspect.signature(base.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return cache_kw, "logits_to_keep" in params


def output_cache(out: Any) -> Any:
    """The KV cache a model's forward returned, under either of its names."""
    return out["cache"] if "cache" in out else out["past_key_values"]
