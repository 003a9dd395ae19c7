"""Multi-adapter decoding: rows of one batch, each with its own LoRA, over one plain base.

A batch whose requests read different adapters (checkpoints of one session, or the base
itself) decodes as one batch instead of one batch per adapter, as S-LoRA and Punica do: the
base weights are read once per step for every row, and each row adds its own low-rank delta.

:class:`MultiLora` holds a plain copy of the model's module tree (sharing every base tensor,
``merged.plain_model(merge=False)``) in which each adapted linear layer is a
:class:`MultiLoraLinear`. For the adapters of a batch, numbered by *slot* (slot 0 is no
adapter: the base), each layer holds their ``A`` stacked by rows and their ``B`` stacked by
columns, so the C = Σ rank columns of the stack belong to slots 1, 2, ... in turn. Before each
forward the sampler gives the slot of every row (``set_rows``); one mask [S, C] per step,
shared by every layer, holds the row's own slot's scale on its own columns and 0 elsewhere:

    y = base(x) + ((x A_catᵀ) · mask) B_catᵀ          x [S, T, in], A_cat [C, in], B_cat [out, C]

A base row's mask is all zeros, so its output is the base layer's exactly; an adapter row's
is ``W x + scale · B (A x)`` (the other slots' columns add exact zeros), which differs from
a merged weight ``(W + scale · B A) x`` by float rounding only (docs/semantics.md#3). The
low-rank products cost C columns for every row, not the row's own rank: cheap next to the
base matmul while C is small against the layer's width (4 adapters of rank 32 on a
576-wide layer: 128 columns), and a gather per row would cost a copy of each row's ``A``
and ``B`` per layer per step instead. Measured on a CPU (1 thread, on a shared and loaded
2-core box, medians of 2-5 alternating runs), 4 adapters × 4 requests in one batch against
four one-adapter (merged) batches: SmolLM2-135M, 24 tokens each, 15.6 s against 32.4 s;
the tiny model, 64 tokens, 0.79 s against 1.65 s (1.39 s against 2.66 s in a busier run).
The price is per row: 16 rows of one adapter decode 8% slower this way than merged on
SmolLM2 (11.4 s against 10.6 s) and about 1.5× slower on the tiny model, whose layers are
128 wide; so a batch of one weights stays merged (decoders.py).

Adapters are added as a batch meets them (:meth:`MultiLora.slot`; a request joining
mid-batch may bring a new one: the stacks are rebuilt and the running rows keep their slots)
and dropped when it ends (:meth:`MultiLora.clear`). The delta is computed in the adapter's
dtype (float32) and cast to the base's, as peft's float32 path does.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from localsession.engine.checkpoint import ADAPTER_NAME
from localsession.engine.fast_linear import linear
from localsession.engine.merged import adapted_layers, plain_model


def can_mix(peft_model: Any) -> bool:
    """Whether every adapted layer of ``peft_model`` is a plain LoRA over a linear layer
    (no DoRA or other variant, no LoRA bias, no dropout): what :class:`MultiLoraLinear`
    computes."""
    layers = adapted_layers(peft_model)
    return bool(layers) and all(_plain(m) for m in layers.values())


def _plain(layer: Any) -> bool:
    base = layer.get_base_layer()
    return (
        isinstance(base, torch.nn.Linear)
        and list(getattr(layer, "lora_A", {})) == [ADAPTER_NAME]
        and not getattr(layer, "use_dora", {}).get(ADAPTER_NAME, False)
        and not getattr(layer, "lora_variant", {})
        and layer.lora_B[ADAPTER_NAME].bias is None
        and isinstance(layer.lora_dropout[ADAPTER_NAME], torch.nn.Identity)
    )


class _Rows:
    """The per-step row state every :class:`MultiLoraLinear` of one model reads."""

    def __init__(self) -> None:
        #: [S, C] each row's scale on its own slot's columns, 0 elsewhere; None: no adapter
        self.mask_SC: Tensor | None = None


class MultiLoraLinear(torch.nn.Module):
    """A base linear layer plus each row's own low-rank delta (module docstring)."""

    def __init__(self, base_layer: torch.nn.Module, rows: _Rows) -> None:
        super().__init__()
        self.base_layer = base_layer
        self._rows = rows
        #: [C, in] and [out, C]: the batch's adapters stacked (None: no adapter yet)
        self.a_CI: Tensor | None = None
        self.b_OC: Tensor | None = None

    def forward(self, x_STI: Tensor) -> Tensor:
        out_STO = self.base_layer(x_STI)
        mask_SC, a_CI, b_OC = self._rows.mask_SC, self.a_CI, self.b_OC
        if mask_SC is None or a_CI is None or b_OC is None:
            return out_STO  # type: ignore[no-any-return]
        x_in = x_STI if x_STI.dtype == a_CI.dtype else x_STI.to(a_CI.dtype)
        low_STC = linear(x_in, a_CI) * mask_SC.unsqueeze(1)  # [S, T, C]
        delta_STO = linear(low_STC, b_OC)  # [S, T, out]
        return out_STO + delta_STO.to(out_STO.dtype)  # type: ignore[no-any-return]


@dataclass
class _Slot:
    key: Hashable
    #: layer name -> (A [r, in], B [out, r]) on the device, in the adapter's dtype
    weights: dict[str, tuple[Tensor, Tensor]]
    scale: float
    rank: int


class MultiLora:
    """One engine's multi-adapter decoding model and the adapters of the running batch."""

    def __init__(
        self, peft_model: Any, adapter: Mapping[str, torch.nn.Parameter], device: torch.device
    ) -> None:
        layers = adapted_layers(peft_model)
        names = {id(p): name for name, p in adapter.items()}
        #: layer name -> (its A's, its B's parameter name in a snapshot)
        self._params = {
            layer_name: (
                names[id(layer.lora_A[ADAPTER_NAME].weight)],
                names[id(layer.lora_B[ADAPTER_NAME].weight)],
            )
            for layer_name, layer in layers.items()
        }
        #: the session's own scale (a snapshot of its rank and alpha uses it)
        self._scale = {float(m.scaling[ADAPTER_NAME]) for m in layers.values()}.pop()
        self._dtype = next(iter(adapter.values())).dtype
        self._device = device
        self._rows = _Rows()
        self.model: torch.nn.Module = plain_model(peft_model, merge=False)
        self._layers: dict[str, MultiLoraLinear] = {}
        for layer_name, layer in layers.items():
            wrapped = MultiLoraLinear(layer.get_base_layer(), self._rows)
            self.model.set_submodule(layer_name, wrapped)
            self._layers[layer_name] = wrapped
        self._slots: list[_Slot] = []
        #: [C] the slot of each stacked column, and its scale
        self._col_slot_C = torch.zeros(0, dtype=torch.long, device=device)
        self._col_scale_C = torch.zeros(0, dtype=self._dtype, device=device)
        self._row_slots: tuple[int, ...] = ()

    @property
    def adapters(self) -> int:
        """How many adapters the running batch has met (slots 1..n)."""
        return len(self._slots)

    @torch.no_grad()
    def slot(self, key: Hashable, snapshot: Mapping[str, Tensor] | None) -> int:
        """The slot of adapter ``snapshot`` (0 for ``None``, the base), stacking it into
        every layer the first time ``key`` is met in this batch. A snapshot of another rank
        or alpha (``snapshots.ForeignSnapshot``) brings its own ``scaling``."""
        if snapshot is None:
            return 0
        for number, known in enumerate(self._slots, start=1):
            if known.key == key:
                return number
        weights = {
            layer: (
                snapshot[a].to(self._device, self._dtype),
                snapshot[b].to(self._device, self._dtype),
            )
            for layer, (a, b) in self._params.items()
        }
        scale = float(getattr(snapshot, "scaling", self._scale))
        rank = next(iter(weights.values()))[0].shape[0]
        self._slots.append(_Slot(key, weights, scale, rank))
        self._restack()
        return len(self._slots)

    def _restack(self) -> None:
        for name, layer in self._layers.items():
            layer.a_CI = torch.cat([s.weights[name][0] for s in self._slots])  # [C, in]
            layer.b_OC = torch.cat([s.weights[name][1] for s in self._slots], dim=1)  # [out, C]
        col_slot = [n for n, s in enumerate(self._slots, start=1) for _ in range(s.rank)]
        col_scale = [s.scale for s in self._slots for _ in range(s.rank)]
        self._col_slot_C = torch.tensor(col_slot, dtype=torch.long, device=self._device)
        self._col_scale_C = torch.tensor(col_scale, dtype=self._dtype, device=self._device)
        self._row_slots = ()  # the mask's columns changed: rebuild it at the next set_rows

    def set_rows(self, slots: Sequence[int]) -> None:
        """The slot of each row of the next forward (the sampler calls this before every
        prefill and decode step). The mask is rebuilt only when the rows changed. A slot's
        columns stay in the stacks after its rows finish, until the batch ends."""
        slots = tuple(slots)
        if slots == self._row_slots and self._rows.mask_SC is not None:
            return
        self._row_slots = slots
        if not self._slots or not any(slots):  # no row has an adapter: the base layers only
            self._rows.mask_SC = None
            return
        slot_S = torch.tensor(slots, dtype=torch.long, device=self._device)
        own_SC = slot_S.unsqueeze(1) == self._col_slot_C.unsqueeze(0)  # [S, C]
        self._rows.mask_SC = own_SC.to(self._dtype) * self._col_scale_C  # [S, C]

    def clear(self) -> None:
        """Drop the batch's adapters and row state (the base tensors stay shared)."""
        self._slots = []
        self._rows.mask_SC = None
        self._row_slots = ()
        for layer in self._layers.values():
            layer.a_CI = layer.b_OC = None
