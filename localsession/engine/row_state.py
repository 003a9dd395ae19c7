"""Per-row state of the static decoder: one device tensor per field, aligned with the slots.

Row i of every tensor belongs to the stream in KV slot i (slot_cache.py). The tensors are
allocated at the slot count and only ever written in place (a join writes its rows, a
compaction moves rows to the front, a step advances ``ids`` and ``pos``), so their
addresses stay fixed for a cache generation and a captured CUDA graph can read them.

Every field is declared once in :data:`ROW_FIELDS`: how a stream gives its value, its
dtype and the value bucket-padding rows hold. Joining, compaction and growth handle every
field alike, so a new per-row input to the step (say, an adapter slot per row) is one
more entry here and one more read in the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from localsession.engine.streams import SampledStream


@dataclass(frozen=True)
class RowField:
    """One per-row tensor: the stream's value, its dtype, the padding rows' value."""

    value: Callable[[SampledStream], float | int]
    dtype: torch.dtype
    pad: float | int


#: name -> field. ``ids``: the token the next step feeds; ``pos``: the column (= position
#: id) it is written at; ``last_pos``: the last column the stream may write (its prompt
#: plus ``max_tokens``, less one), past which ``pos`` stays put.
ROW_FIELDS: dict[str, RowField] = {
    "ids": RowField(lambda s: s.tokens[-1], torch.long, 0),
    "pos": RowField(lambda s: s.prompt_len + len(s.tokens) - 1, torch.long, 0),
    "last_pos": RowField(lambda s: s.prompt_len + s.max_tokens - 1, torch.long, 0),
    "temp": RowField(lambda s: s.temperature, torch.float32, 0.0),
    "top_k": RowField(lambda s: s.top_k, torch.long, 0),
    "top_p": RowField(lambda s: s.top_p, torch.float32, 1.0),
}


class RowState:
    """The :data:`ROW_FIELDS` tensors of ``capacity`` slots (module docstring)."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.device = device
        self.tensors: dict[str, Tensor] = {
            name: torch.full((capacity,), f.pad, dtype=f.dtype, device=device)
            for name, f in ROW_FIELDS.items()
        }

    @property
    def capacity(self) -> int:
        return int(self.tensors["ids"].shape[0])

    def view(self, rows: int) -> dict[str, Tensor]:
        """The first ``rows`` rows of every field (views: writes land in the state)."""
        return {name: t[:rows] for name, t in self.tensors.items()}

    def write(self, first: int, streams: Sequence[SampledStream]) -> None:
        """Set rows ``first ..`` from ``streams`` (one host-to-device copy per field)."""
        end = first + len(streams)
        for name, f in ROW_FIELDS.items():
            values = torch.tensor([f.value(s) for s in streams], dtype=f.dtype)
            self.tensors[name][first:end] = values.to(self.device)

    def set(self, name: str, rows: Sequence[int], value: float | int) -> None:
        """Set field ``name`` to ``value`` in ``rows``."""
        if rows:
            index = torch.tensor(list(rows), device=self.device)
            self.tensors[name][index] = value

    def keep(self, rows: Tensor) -> None:
        """Move rows ``rows`` (in order) to the front, as ``SlotCache.keep`` does; the rows
        after them are padding again. (A moved row's old copy, left there, would pad a later
        bucket as that stream: its ``pos`` advancing each step towards its ``last_pos``,
        past the columns the live rows need.)"""
        n = int(rows.shape[0])
        for name, f in ROW_FIELDS.items():
            t = self.tensors[name]
            t[:n] = t[rows]
            t[n:] = f.pad

    def grow(self, capacity: int) -> None:
        """Hold ``capacity`` rows (new tensors: their addresses change with the cache's)."""
        if capacity <= self.capacity:
            return
        for name, f in ROW_FIELDS.items():
            old = self.tensors[name]
            grown = torch.full((capacity,), f.pad, dtype=f.dtype, device=self.device)
            grown[: old.shape[0]] = old
            self.tensors[name] = grown
