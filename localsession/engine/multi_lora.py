"""Multi-adapter decoding: rows of one batch, each with its own LoRA, over one plain base.

A batch whose requests read different adapters (checkpoints of one session, or the base
itself) decodes as one batch instead of one batch per adapter, as S-LoRA and Punica do: the
base weights are read once per step for every row, and each row adds its own low-rank delta.

:class:`MultiLora` holds a plain copy of the model's module tree (sharing every base tensor,
``merged.plain_model(merge=False)``) in which each adapted linear layer is a
:class:`MultiLoraLinear`. The batch's adapters are numbered by *slot* (slot 0 is no adapter:
the base). Before each forward the sampler gives the slot of every row (``set_rows``), and
the rows are grouped by adapter once per change of rows (:class:`_Groups`, shared by every
layer): G groups, one per adapter with rows, each padded to the largest group's M rows.
Each layer then adds, per group g (adapter ``A_g [r, in]``, ``B_g [out, r]``, scale s_g):

    y = base(x) + s_g · B_g (A_g x)      x of group g gathered as [G, M·T, in]: two bmm

and puts each row's delta back in its place. A base row gets none, so its output is the base
layer's exactly; an adapter row's is ``W x + scale · B (A x)``, which differs from a merged
weight ``(W + scale · B A) x`` by float rounding only (docs/semantics.md#3). Adapters of
different ranks are padded with zero columns to the largest rank (they add exact zeros).
Rows already in slot order, in equal groups and with no base row, skip the two gathers.

Each row pays for its own adapter's rank only. The first version multiplied every row by
all the batch's adapters stacked (4 adapters of rank 32: 128 columns, the other slots' masked
to 0). In ``bench/multi_adapter.py``'s burst on SmolLM2-135M (64 rows, 4 adapters, torch's
profiler over the decode loop), its low-rank products took ~48 ms of a ~180 ms step; grouped,
the two ``bmm``, the scale and the add take ~19 ms (the rows arrive in slot order there, so
the gathers are skipped). With gathers, one layer's adapted products took 1.0 ms against
1.27 ms masked (microbenchmark, rows of 4 adapters interleaved). The price per row is still
above a merged weight's, so a batch of one weights stays merged (decoders.py).

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


@dataclass(frozen=True)
class _Groups:
    """One forward's rows grouped by adapter (module docstring): group g holds the rows of
    slot ``present[g]``, padded with its first row to M rows."""

    present: tuple[int, ...]
    #: [G, M] each group's rows; None: the rows are already groups of M in slot order
    index_GM: Tensor | None
    #: [S] each row's place among the G·M gathered rows; None: its own (index_GM is None)
    back_S: Tensor | None
    #: [S, 1, 1] True on base rows (no delta); None: every row has an adapter
    base_S11: Tensor | None
    #: [G, 1, 1] each group's adapter's scale
    scale_G11: Tensor


def group_rows(slots: Sequence[int], scales: Sequence[float], device: torch.device) -> _Groups:
    """``slots``' rows (slot 0: the base; at least one row has an adapter) grouped by
    adapter; ``scales[k]``: slot k+1's scale."""
    present = tuple(sorted({s for s in slots if s}))
    rows = [[i for i, s in enumerate(slots) if s == p] for p in present]
    m = max(len(r) for r in rows)
    scale_G11 = torch.tensor([scales[p - 1] for p in present], device=device).view(-1, 1, 1)
    if [i for r in rows for i in r] == list(range(len(slots))) and all(len(r) == m for r in rows):
        return _Groups(present, None, None, None, scale_G11)
    place = {i: g * m + j for g, r in enumerate(rows) for j, i in enumerate(r)}
    index_GM = torch.tensor([r + r[:1] * (m - len(r)) for r in rows], device=device)
    back_S = torch.tensor([place.get(i, 0) for i in range(len(slots))], device=device)
    base = [s == 0 for s in slots]
    base_S11 = torch.tensor(base, device=device).view(-1, 1, 1) if any(base) else None
    return _Groups(present, index_GM, back_S, base_S11, scale_G11)


class _Rows:
    """The per-step row state every :class:`MultiLoraLinear` of one model reads."""

    def __init__(self) -> None:
        #: the rows grouped by adapter; None: no row has an adapter
        self.groups: _Groups | None = None


class MultiLoraLinear(torch.nn.Module):
    """A base linear layer plus each row's own low-rank delta (module docstring)."""

    def __init__(self, base_layer: torch.nn.Module, rows: _Rows) -> None:
        super().__init__()
        self.base_layer = base_layer
        self._rows = rows
        #: [N, in, R] and [N, R, out]: every adapter of the batch, Aᵀ and Bᵀ zero-padded to
        #: the largest rank R (None: no adapter yet) ...
        self.a_NIR: Tensor | None = None
        self.b_NRO: Tensor | None = None
        #: ... and those of the groups' adapters, in group order
        self.a_GIR: Tensor | None = None
        self.b_GRO: Tensor | None = None

    def forward(self, x_STI: Tensor) -> Tensor:
        out_STO = self.base_layer(x_STI)
        groups, a_GIR, b_GRO = self._rows.groups, self.a_GIR, self.b_GRO
        if groups is None or a_GIR is None or b_GRO is None:
            return out_STO  # type: ignore[no-any-return]
        x_in = x_STI if x_STI.dtype == a_GIR.dtype else x_STI.to(a_GIR.dtype)
        s, t = x_in.shape[0], x_in.shape[1]
        g, width = a_GIR.shape[0], out_STO.shape[-1]
        x_G = x_in if groups.index_GM is None else x_in[groups.index_GM]  # [G, M, T, in]
        low_GKR = torch.bmm(x_G.reshape(g, -1, x_in.shape[-1]), a_GIR).mul_(groups.scale_G11)
        delta_STO = torch.bmm(low_GKR, b_GRO).view(-1, t, width)  # [G·M, T, out]
        if groups.back_S is not None:
            delta_STO = delta_STO[groups.back_S]  # [S, T, out]
        if groups.base_S11 is not None:
            delta_STO.masked_fill_(groups.base_S11, 0.0)
        return out_STO.add_(delta_STO.view(s, t, width).to(out_STO.dtype))  # type: ignore[no-any-return]


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
        self._row_slots: tuple[int, ...] = ()
        #: the adapters (slots) the layers' group stacks hold, in order
        self._present: tuple[int, ...] = ()

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
        rank = max(s.rank for s in self._slots)
        for name, layer in self._layers.items():
            a_, b_ = zip(*(s.weights[name] for s in self._slots), strict=True)
            layer.a_NIR = torch.stack([_padded(a.t(), rank, 1) for a in a_])  # [N, in, R]
            layer.b_NRO = torch.stack([_padded(b.t(), rank, 0) for b in b_])  # [N, R, out]
            layer.a_GIR = layer.b_GRO = None
        self._present = ()
        self._row_slots = ()  # the stacks changed: regroup at the next set_rows

    def set_rows(self, slots: Sequence[int]) -> None:
        """The slot of each row of the next forward (the sampler calls this before every
        prefill and decode step). The rows are regrouped only when they changed, and the
        layers' group stacks only when the set of adapters with rows changed. A slot's
        adapter stays stacked after its rows finish, until the batch ends."""
        slots = tuple(slots)
        if slots == self._row_slots and self._rows.groups is not None:
            return
        self._row_slots = slots
        if not self._slots or not any(slots):  # no row has an adapter: the base layers only
            self._rows.groups = None
            return
        scales = [s.scale for s in self._slots]
        groups = group_rows(slots, scales, self._device)
        if groups.present != self._present:
            self._present = groups.present
            every = groups.present == tuple(range(1, len(self._slots) + 1))
            pick = torch.tensor([p - 1 for p in groups.present], device=self._device)
            for layer in self._layers.values():
                assert layer.a_NIR is not None and layer.b_NRO is not None
                layer.a_GIR = layer.a_NIR if every else layer.a_NIR[pick].contiguous()
                layer.b_GRO = layer.b_NRO if every else layer.b_NRO[pick].contiguous()
        self._rows.groups = groups

    def clear(self) -> None:
        """Drop the batch's adapters and row state (the base tensors stay shared)."""
        self._slots = []
        self._rows.groups = None
        self._row_slots = self._present = ()
        for layer in self._layers.values():
            layer.a_NIR = layer.b_NRO = layer.a_GIR = layer.b_GRO = None


def _padded(m: Tensor, size: int, dim: int) -> Tensor:
    """``m`` with zeros appended along ``dim`` up to ``size``, contiguous."""
    short = size - m.shape[dim]
    pad = [0, short] if dim == 1 else [0, 0, 0, short]
    return (torch.nn.functional.pad(m, pad) if short else m).contiguous()
