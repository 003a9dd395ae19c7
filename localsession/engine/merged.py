"""Plain copies of the model for decoding: no LoRA wrappers, adapter merged into the weights.

Decoding runs one token per stream per step, so on a small model its time goes to
per-layer dispatch: an adapted linear layer costs three matmuls, an add and peft's wrapper
logic instead of one matmul. The sampler therefore decodes with a *plain* model, a copy of
the module tree in which every LoRA layer is replaced by its base layer:

- for the base weights (``merge=False``) that base layer is the live, frozen module itself,
  so the plain model shares every tensor and costs no memory, and its outputs are bit for bit
  the adapter-disabled model's;
- for an adapter snapshot (``merge=True``) each adapted layer gets a new weight
  ``W + scaling · B @ A`` (peft's own ``get_delta_weight``), and every other tensor
  (embeddings, norms, an unadapted head) is shared. An adapted output head
  (``train_unembed``) is not merged: its copy is :class:`LowRankHead`, the shared base head
  plus copies of the snapshot's A and B (r·(d+V) values instead of a new V×d weight, and
  a head tied to the input embedding stays tied). Logits then differ from the unmerged
  model by float rounding only (~1e-6 in float32).

Merging is done only in float32: in bfloat16 a small LoRA delta would be rounded away when
added to ``W`` (8 mantissa bits), so half-precision engines keep decoding unmerged. The
engine keeps one merged copy and re-merges it in place (:func:`remerge_`, a few small matmuls)
when a batch asks for a different snapshot.

Merged copies are full-size weights, so they live in one process-wide LRU
(:data:`MERGED_CACHE`) bounded by ``LOCALSESSION_MERGED_CACHE_MB`` (default 512 MB) over all
sessions. A snapshot whose merged copy would not fit the budget at all is decoded unmerged
(through the shared base with the snapshot swapped into the session's adapter), so
sampling never holds more than the budget beyond the adapters.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch
from peft.tuners.lora import LoraLayer

from localsession.engine.checkpoint import ADAPTER_NAME
from localsession.engine_options import EngineOptions

#: Largest adapted-weight count (elements) for which a merged copy is made; above it the
#: extra memory is not worth it and decoding stays unmerged.
MERGE_MAX_ELEMENTS = 200_000_000


def adapted_layers(peft_model: Any) -> dict[str, Any]:
    """The LoRA layers of a peft model, by module name inside its base model."""
    base = peft_model.get_base_model()
    return {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}


def can_merge(peft_model: Any, dtype: torch.dtype) -> bool:
    """Whether :func:`plain_model` with ``merge=True`` is exact enough and cheap enough."""
    if dtype != torch.float32:
        return False
    layers = adapted_layers(peft_model)
    if any(getattr(m, "use_dora", {}).get(ADAPTER_NAME) for m in layers.values()):
        return False
    size = sum(
        m.get_base_layer().weight.numel()
        for m in layers.values()
        if not _is_head(peft_model, m)  # a head stays low-rank (LowRankHead)
    )
    return size <= MERGE_MAX_ELEMENTS


class LowRankHead(torch.nn.Module):
    """An adapted output head in a merged copy: ``base(x) + scaling · (x Aᵀ) Bᵀ`` with
    frozen copies of one snapshot's ``A`` [r, d] and ``B`` [V, r] (peft's own order)."""

    def __init__(self, layer: Any) -> None:
        super().__init__()
        self.base_layer = layer.get_base_layer()
        self.a_RD = torch.nn.Parameter(layer.lora_A[ADAPTER_NAME].weight.detach().clone(), False)
        self.b_VR = torch.nn.Parameter(layer.lora_B[ADAPTER_NAME].weight.detach().clone(), False)
        self.scaling = float(layer.scaling[ADAPTER_NAME])

    @torch.no_grad()
    def load_(self, layer: Any) -> None:
        """Take the adapter values ``layer`` holds now."""
        self.a_RD.copy_(layer.lora_A[ADAPTER_NAME].weight)
        self.b_VR.copy_(layer.lora_B[ADAPTER_NAME].weight)

    def forward(self, x_BTD: torch.Tensor) -> torch.Tensor:
        out_BTV = self.base_layer(x_BTD)
        low_BTR = x_BTD.to(self.a_RD.dtype) @ self.a_RD.T
        return out_BTV + ((low_BTR @ self.b_VR.T) * self.scaling).to(out_BTV.dtype)


def _is_head(peft_model: Any, layer: Any) -> bool:
    return layer is peft_model.get_base_model().get_output_embeddings()


@torch.no_grad()
def plain_model(peft_model: Any, *, merge: bool) -> torch.nn.Module:
    """The base model's module tree with each LoRA layer replaced by a plain base layer.

    ``merge=False``: the live base layers themselves. ``merge=True``: copies of them whose
    weight is ``W + delta`` for the adapter values the peft model holds *now* (the caller
    swaps a snapshot in first). Every parameter and buffer not merged is shared, not copied.
    """
    base = peft_model.get_base_model()
    layers = adapted_layers(peft_model)
    memo: dict[int, Any] = {id(t): t for t in base.parameters()}
    memo.update({id(t): t for t in base.buffers()})
    plain: torch.nn.Module = copy.deepcopy(base, memo)
    for name, layer in layers.items():
        base_layer = layer.get_base_layer()
        if merge and _is_head(peft_model, layer):
            replacement = LowRankHead(layer)
        elif merge:
            replacement = copy.copy(base_layer)
            replacement._parameters = dict(base_layer._parameters)
            delta = layer.get_delta_weight(ADAPTER_NAME)
            merged = base_layer.weight + delta.to(base_layer.weight.dtype)
            replacement.weight = torch.nn.Parameter(merged, requires_grad=False)
        else:
            replacement = base_layer
        plain.set_submodule(name, replacement)
    plain.eval()
    return plain


@torch.no_grad()
def remerge_(plain: torch.nn.Module, peft_model: Any) -> None:
    """Rewrite the merged weights of ``plain`` (from ``plain_model(..., merge=True)``) for
    the adapter values the peft model holds now; the same values a fresh build gives."""
    for name, layer in adapted_layers(peft_model).items():
        if _is_head(peft_model, layer):
            head: LowRankHead = plain.get_submodule(name)  # type: ignore[assignment]
            head.load_(layer)
            continue
        base_weight = layer.get_base_layer().weight
        delta = layer.get_delta_weight(ADAPTER_NAME)
        target: torch.Tensor = plain.get_submodule(name).weight  # type: ignore[assignment]
        torch.add(base_weight, delta.to(base_weight.dtype), out=target)


def merged_bytes(peft_model: Any) -> int:
    """Bytes of new tensors a merged copy holds (one weight per adapted layer; A and B for
    an adapted head)."""
    return sum(
        sum(t.numel() * t.element_size() for t in _new_tensors(peft_model, m))
        for m in adapted_layers(peft_model).values()
    )


def _new_tensors(peft_model: Any, layer: Any) -> tuple[torch.Tensor, ...]:
    """What a merged copy holds anew for ``layer``: its weight's size, or A and B."""
    if _is_head(peft_model, layer):
        return layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight
    return (layer.get_base_layer().weight,)


@dataclass
class _Entry:
    module: torch.nn.Module
    nbytes: int
    owner: object


class MergedCache:
    """Merged decoding copies of every session in the process, least recently used first,
    within a byte budget. Keys are ``(owner, snapshot key)``: an owner (one engine) only
    ever decodes with its own entries, so an eviction by another session drops a reference
    and never touches a module in use."""

    def __init__(self, budget: int | None = None) -> None:
        #: bytes allowed: ``EngineOptions.merged_cache_bytes``, set by each engine that
        #: starts (:meth:`set_budget`: one service's engines share one setting)
        self._budget = budget if budget is not None else EngineOptions().merged_cache_bytes
        self._mutex = threading.Lock()
        self._entries: OrderedDict[tuple[object, Hashable], _Entry] = OrderedDict()

    @property
    def budget(self) -> int:
        """Bytes allowed (``LOCALSESSION_MERGED_CACHE_MB``; 0 turns merging off)."""
        return self._budget

    def set_budget(self, nbytes: int) -> None:
        """Allow ``nbytes`` from now on (entries past it go at the next :meth:`make_room`)."""
        with self._mutex:
            self._budget = nbytes

    @property
    def used(self) -> int:
        """Bytes held now."""
        with self._mutex:
            return sum(e.nbytes for e in self._entries.values())

    def get(self, owner: object, key: Hashable) -> torch.nn.Module | None:
        """The cached copy, marked most recently used, or ``None``."""
        with self._mutex:
            entry = self._entries.get((owner, key))
            if entry is None:
                return None
            self._entries.move_to_end((owner, key))
            return entry.module

    def make_room(self, owner: object, nbytes: int) -> torch.nn.Module | None:
        """Free room for ``nbytes``: evict least-recently-used entries until it fits. The
        first evicted entry of ``owner`` itself is returned for reuse (re-merged in place,
        no allocation), its bytes then counting as the room made."""
        reused: torch.nn.Module | None = None
        with self._mutex:
            used = sum(e.nbytes for e in self._entries.values())
            for full_key in list(self._entries):
                if used + (0 if reused is not None else nbytes) <= self.budget:
                    break
                entry = self._entries.pop(full_key)
                used -= entry.nbytes
                if reused is None and entry.owner is owner and entry.nbytes == nbytes:
                    reused = entry.module
        return reused

    def put(self, owner: object, key: Hashable, module: torch.nn.Module, nbytes: int) -> None:
        """Add (most recently used)."""
        with self._mutex:
            self._entries[(owner, key)] = _Entry(module, nbytes, owner)

    def drop_owner(self, owner: object) -> None:
        """Forget every entry of ``owner`` (its engine closed)."""
        with self._mutex:
            for full_key in [k for k, e in self._entries.items() if e.owner is owner]:
                del self._entries[full_key]


#: The process-wide cache every ``TorchEngine`` shares.
MERGED_CACHE = MergedCache()
