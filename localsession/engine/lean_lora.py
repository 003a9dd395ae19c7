"""peft's LoRA linear layer with a direct forward for the one adapter an engine uses.

Every call of a peft LoRA ``Linear`` walks its general dispatch (argument checks, variant
keywords, the active-adapter loop, four sub-module calls) around its three matmuls. On a
small model that dispatch is a real share of a step: on ``localsession/tiny`` one adapted
layer took 117 µs a call through peft and 88 µs through :class:`LeanLoraLinear` (59 µs for
the bare ops), and a 1×8 forward + backward over its 14 layers took 7.72 ms against peft's
8.20 ms (medians, alternating runs).

:func:`install` re-classes each plain LoRA ``Linear`` of a freshly wrapped model as
:class:`LeanLoraLinear`, a subclass whose forward computes, for input ``x``,

    y = linear(x, W, b) + linear(linear(x', A), B) · scaling,   cast back to y's dtype,

where ``x'`` is ``x`` in the adapter's dtype and ``linear`` is fast_linear.py's, which the
layer's own sub-layers (re-classed as ``FastLinear``) also run. These are the same kernels
in the same order as peft's vanilla-LoRA path, so outputs and gradients are bit for bit equal
(tests/engine/test_lean_lora.py).

Over a half-precision base (bf16 on CUDA, or on a CPU with AMX) peft casts every input to the
float32 adapter: a copy of the activations, two float32 products, and a float32
``[tokens, out]`` term scaled, added and cast back, in both passes. On an H200 (a 0.5B model,
8 × 1024 tokens, 221 ms a step) the profile showed those casts at 31 ms of 160 ms of GPU
time and the float32 GEMMs at 28 ms. ``LOCALSESSION_LORA_PRECISION``
(``EngineOptions.lora_precision``) chooses:

- ``mixed`` (the default): the products run in the base's dtype, as autocast would run them:
  ``linear(linear(x, A'), B')`` with ``A'`` and ``B' = B · scaling`` cast to it (``[r, in]``
  and ``[out, r]``, a few KB), added to the base's output in that dtype. The adapter, its
  gradients (autograd casts them back) and the optimizer state stay float32.
- ``fp32``: peft's float32 products, bit for bit.

A float32 base is unaffected either way. Anything else the layer can be asked to do (adapters
disabled, merged weights, extra arguments, another active adapter) goes to peft's own
forward, and a layer with hooks (accelerate's, on a disk-offloaded base) is never
re-classed. The layer's ``scaling`` and parameters are read on every call, so a swapped-in
snapshot (snapshots.py) is seen.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners.lora.layer import Linear as LoraLinear

from localsession.engine.checkpoint import ADAPTER_NAME
from localsession.engine.fast_linear import FastLinear, linear

#: The instance attribute :func:`install` sets: this layer's half-base products are half.
_HALF = "_lean_half_products"

#: The instance attributes behind peft's ``active_adapter``, ``disable_adapters`` and
#: ``merged`` properties (and the scale), which the lean forward reads directly; a peft
#: whose layers lack them keeps its own forward.
_READ_DIRECTLY = {"_active_adapter", "_disable_adapters", "merged_adapters", "scaling"}


class LeanLoraLinear(LoraLinear):  # type: ignore[misc]
    """A peft LoRA ``Linear`` whose plain case (one active adapter, no dropout, no variant,
    nothing merged or disabled) skips peft's dispatch."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        # The layer's state is read from the instance and sub-module dicts that peft's
        # properties and nn.Module.__getattr__ read (15 Python calls a layer otherwise, 210
        # a tiny-model forward), so a swapped parameter or a changed scale is still seen.
        state = self.__dict__
        active = state["_active_adapter"]
        plain = active == ADAPTER_NAME or active == [ADAPTER_NAME]
        if args or kwargs or state["_disable_adapters"] or state["merged_adapters"] or not plain:
            return super().forward(x, *args, **kwargs)  # type: ignore[no-any-return]
        modules = state["_modules"]
        base = modules["base_layer"]._parameters
        a_weight = modules["lora_A"]._modules[ADAPTER_NAME]._parameters["weight"]  # [r, in]
        b_weight = modules["lora_B"]._modules[ADAPTER_NAME]._parameters["weight"]  # [out, r]
        y = linear(x, base["weight"], base["bias"])  # [..., out]
        scale = state["scaling"][ADAPTER_NAME]
        if x.dtype != a_weight.dtype and state.get(_HALF, False):  # mixed: module docstring
            a_half = a_weight.to(x.dtype)  # [r, in]
            b_half = (b_weight * scale).to(x.dtype)  # [out, r]
            return y + linear(linear(x, a_half), b_half)  # type: ignore[no-any-return]
        x_in = x if x.dtype == a_weight.dtype else x.to(a_weight.dtype)
        low_rank = linear(x_in, a_weight)  # [..., r]
        delta = linear(low_rank, b_weight)  # [..., out]
        out = y + delta * scale
        return out if out.dtype == y.dtype else out.to(y.dtype)  # a half base: back to it


def _plain(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` is a peft LoRA ``Linear`` in the case :class:`LeanLoraLinear`
    computes: over an ``nn.Linear``, with only this engine's adapter, which has no dropout,
    no bias of its own and no variant (DoRA and the like), and with no hooks on it or its
    sub-modules."""
    return (
        type(layer) is LoraLinear
        and _READ_DIRECTLY <= vars(layer).keys()
        and type(layer.base_layer) in (torch.nn.Linear, FastLinear)
        and list(layer.lora_A) == [ADAPTER_NAME]
        and not layer.lora_variant
        and layer.lora_B[ADAPTER_NAME].bias is None
        and isinstance(layer.lora_dropout[ADAPTER_NAME], torch.nn.Identity)
        and all(_unhooked(m) for m in _parts(layer))
    )


def _parts(layer: Any) -> tuple[torch.nn.Module, ...]:
    """A LoRA layer and the sub-modules whose weights its forward uses."""
    return (layer, layer.base_layer, *layer.lora_A.values(), *layer.lora_B.values())


def _unhooked(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` runs nothing but its forward: no torch hooks and no
    accelerate hook (which brings disk-offloaded weights in for the call, placement.py), so
    its weights may be used directly."""
    hooks = (module._forward_hooks, module._forward_pre_hooks)
    return not any(hooks) and getattr(module, "_hf_hook", None) is None


def install(peft_model: torch.nn.Module, precision: str = "mixed") -> int:
    """Re-class every plain LoRA ``Linear`` in ``peft_model`` as :class:`LeanLoraLinear`,
    its half-base products in the base's dtype when ``precision`` is ``mixed`` (else
    float32); returns how many were."""
    half = precision == "mixed"
    count = 0
    for module in peft_model.modules():
        if _plain(module):
            module.__class__ = LeanLoraLinear
            vars(module)[_HALF] = half
            count += 1
    return count
