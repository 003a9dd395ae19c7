"""The static decoder's KV cache: preallocated slots, one row per stream, written in place.

A :class:`SlotCache` holds, per layer, keys and values ``[R, H, C, D]``: R slots (rows) of C
columns. A stream owns one slot; its prompt sits in columns ``[0, P)`` (no left padding: a
row's column *is* its position id) and decode step t writes column ``P + t`` of each row
in place (:meth:`SlotCache.update`, the call transformers' attention makes). Rows therefore
sit at different columns, and a 4-D attention mask (``mask_for``) lets each row see its own
columns only. Nothing grows by concatenation and every decode step has the same shapes, so
a step can be compiled or captured as a CUDA graph once per shape (decode_step.py).

Sizes come from the request mix: R is the live rows' batch-size bucket (:func:`bucket_for`:
1, 2, 4, ..., 256, then multiples of 256) and C the longest prompt plus the most tokens a
stream may draw, capped at ``FIRST_ROOM`` positions beyond the longest prompt and rounded
up to :data:`COLUMN_QUANTUM` (:func:`columns_for`). A join past R or a stream past C moves
the slots into larger buffers (:meth:`grow`): rare, and each move is a new cache generation
(a new compile/graph key). Finished rows are compacted to the front (:meth:`keep`) so the
step runs on the smallest bucket that holds the live rows. The buffers belong to one batch:
when its last stream ends the sampler drops the cache and its memory is freed
(:data:`LIVE` counts the caches alive, for tests).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

#: Batch-size buckets up to 256; larger batches round up to a multiple of the last.
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Columns are allocated in multiples of this (fewer distinct shapes, fewer compiles).
COLUMN_QUANTUM = 64
#: Eager CPU steps attend over the used columns rounded up to this (``visible_for``).
VISIBLE_QUANTUM = 16
#: Most columns reserved up front beyond the longest prompt (as kv_room.FIRST_ROOM).
FIRST_ROOM = 256

#: Every SlotCache alive (tests check that a finished batch frees its cache).
LIVE: weakref.WeakSet[SlotCache] = weakref.WeakSet()
_generations = itertools.count(1)


def bucket_for(rows: int) -> int:
    """The smallest bucket holding ``rows`` rows (``rows`` >= 1)."""
    if rows < 1:
        raise ValueError(f"a batch has at least one row, not {rows}")
    for bucket in BUCKETS:
        if rows <= bucket:
            return bucket
    last = BUCKETS[-1]
    return -(-rows // last) * last


def columns_for(longest_prompt: int, most_needed: int) -> int:
    """Columns for streams whose longest prompt is ``longest_prompt`` and which may reach
    ``most_needed`` positions: at most ``FIRST_ROOM`` beyond the prompt, rounded up to
    :data:`COLUMN_QUANTUM`."""
    need = max(1, min(most_needed, longest_prompt + FIRST_ROOM))
    return -(-need // COLUMN_QUANTUM) * COLUMN_QUANTUM


class SlotCache:
    """Per-layer key/value slots ``[R, H, C, D]`` (module docstring). ``active`` rows and
    ``col_B`` (each active row's write column) are set before each forward."""

    def __init__(self, like: Sequence[tuple[Tensor, Tensor]], rows: int, columns: int) -> None:
        """Empty slots shaped after ``like``: one (keys, values) pair ``[*, H, *, D]`` per
        layer (a prefilled cache's)."""
        self.layers: list[tuple[Tensor, Tensor]] = [
            (
                k.new_zeros((rows, k.shape[1], columns, k.shape[3])),
                v.new_zeros((rows, v.shape[1], columns, v.shape[3])),
            )
            for k, v in like
        ]
        self.rows, self.columns = rows, columns
        self.generation = next(_generations)  # new buffers, new compile/graph keys
        self.active = rows
        #: columns the step attends over (``None``: all). Eager steps on a CPU narrow it to
        #: the live positions (:func:`visible_for`); compiled or captured steps keep all.
        self.visible: int | None = None
        device = like[0][0].device
        self.col_B = torch.zeros(rows, dtype=torch.long, device=device)
        self._row_ids = torch.arange(rows, device=device)
        self.columns_C = torch.arange(columns, device=device)
        #: compiled steps / captured graphs made for these buffers (decode_step.py)
        self.steps: dict[Any, Any] = {}
        #: the step's ``[B, V]`` sampling buffers, kept from step to step (decode_step.py)
        self.work: dict[Any, Tensor] = {}
        LIVE.add(self)

    # -- transformers' cache protocol (what a Llama-family attention calls) -------------

    def update(
        self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        """Write this step's keys and values ``[B, H, 1, D]`` at each row's column.
        -> all columns of the active rows, ``[B, H, C, D]``."""
        keys, values = self.layers[layer_idx]
        b = self.active
        rows_B, col_B = self._row_ids[:b], self.col_B[:b]
        keys[rows_B, :, col_B, :] = key_states[:, :, 0, :]  # [B, H, D]
        values[rows_B, :, col_B, :] = value_states[:, :, 0, :]
        if self.visible is not None:
            return keys[:b, :, : self.visible], values[:b, :, : self.visible]
        return keys[:b], values[:b]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.columns

    # -- slot management ----------------------------------------------------------------

    def load(
        self, slots: Sequence[int], prefilled: Sequence[tuple[Tensor, Tensor]], lengths: Tensor
    ) -> None:
        """Copy left-padded prefilled keys/values ``[N, H, L, D]`` (row n's ``lengths[n]``
        real positions last) into ``slots``, each row's real positions first."""
        width = prefilled[0][0].shape[2]
        # row n, column j <- prefilled column j + (L - len_n); past len_n: masked, any value
        shift_N1 = (width - lengths).unsqueeze(-1)
        src_NL = (torch.arange(width, device=lengths.device) + shift_N1).clamp_(max=width - 1)
        dest = torch.tensor(list(slots), device=self.col_B.device)
        for (keys, values), (k, v) in zip(self.layers, prefilled, strict=True):
            idx = src_NL[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3]).to(k.device)
            keys[dest, :, :width] = k.gather(2, idx)
            values[dest, :, :width] = v.gather(2, idx)

    def keep(self, rows: Tensor) -> None:
        """Move rows ``rows`` (slot indices, in order) to slots ``0 .. len(rows) - 1``."""
        n = int(rows.shape[0])
        for keys, values in self.layers:
            keys[:n] = keys[rows]
            values[:n] = values[rows]

    def grow(self, rows: int, columns: int, used: int) -> None:
        """Move the first ``used`` slots into buffers of at least ``rows`` x ``columns``."""
        rows, columns = max(rows, self.rows), max(columns, self.columns)
        if (rows, columns) == (self.rows, self.columns):
            return
        grown = []
        for keys, values in self.layers:
            k = keys.new_zeros((rows, keys.shape[1], columns, keys.shape[3]))
            v = values.new_zeros((rows, values.shape[1], columns, values.shape[3]))
            k[:used, :, : self.columns] = keys[:used]
            v[:used, :, : self.columns] = values[:used]
            grown.append((k, v))
        self.layers = grown
        device = self.col_B.device
        # (col_B is each step's own: decode_step sets it before the forward)
        self.col_B = torch.zeros(rows, dtype=torch.long, device=device)
        self._row_ids = torch.arange(rows, device=device)
        self.columns_C = torch.arange(columns, device=device)
        self.rows, self.columns = rows, columns
        self.generation = next(_generations)
        self.steps.clear()  # they refer to the old buffers

    def nbytes(self) -> int:
        """Bytes the slots hold."""
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.layers)


def visible_for(cache: SlotCache, last_written: int) -> int:
    """Columns an eager step must attend over when no row writes past ``last_written``:
    rounded up to :data:`VISIBLE_QUANTUM`, at most all. Attention (and grouped-query
    attention's copies of the keys) then reads the live positions, not the whole slot."""
    need = -(-(last_written + 1) // VISIBLE_QUANTUM) * VISIBLE_QUANTUM
    return min(cache.columns, need)


def mask_for(cache: SlotCache, pos_B: Tensor, dtype: torch.dtype) -> Tensor:
    """The 4-D attention mask ``[B, 1, 1, C]`` of a decode step writing column ``pos_B``:
    each row sees its columns ``0 .. pos``, as 0 / the dtype's minimum, added to the scores.
    Additive for SDPA too: it turns a boolean mask into this in every layer's call, ~5% of a
    CPU attention call at 64 rows, with the same result bit for bit."""
    columns_C = cache.columns_C if cache.visible is None else cache.columns_C[: cache.visible]
    keep_B11C = (columns_C.unsqueeze(0) <= pos_B.unsqueeze(-1))[:, None, None, :]
    zero = torch.zeros((), dtype=dtype, device=pos_B.device)
    return torch.where(keep_B11C, zero, torch.finfo(dtype).min)
