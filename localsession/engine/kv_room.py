"""A KV-cache layer with room to grow: a decode step writes its one position in place.

transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, so
every decode step copies the whole cache of every layer: O(L) bytes a step, O(L²) over a
generation. On SmolLM2-135M decoding 64 streams (16 ``sample(num_samples=4)`` calls) that
copy was 12% of the sampler's CPU time, more than its attention (torch profiler: ``cat``
2.38 s of 19.1 s for one burst of 64 tokens each). :class:`RoomyLayer` keeps keys and values
in buffers ``[S, H, capacity, D]`` and exposes the first ``L`` positions as views; an
append that fits writes in place, one that does not moves to a buffer twice as large (or as
large as it needs, if more). With it the same burst's ``cat`` took 7 ms.

Everything else (joins, compaction, ``batch_select_indices``, ``crop``) assigns ``keys`` /
``values`` as transformers' own operations do, and an assigned tensor becomes the new
buffer, exactly full. The views hold the same values the concatenated tensors would, so
attention computes the same numbers (tests/engine/test_kv_room.py: equal logits).

The sampler converts a prefilled cache with :func:`make_roomy` when it is a plain
``DynamicCache`` (``batch_join.joinable``), reserving the most tokens a stream may still
draw, but at most :data:`FIRST_ROOM` positions: a ``max_tokens`` far above what streams
actually draw must not reserve memory up front. So a buffer's spare room is at most
``FIRST_ROOM`` positions or as many as it holds, whichever is more.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from transformers.cache_utils import DynamicLayer

#: Most positions :func:`make_roomy` reserves up front; past them a buffer doubles.
FIRST_ROOM = 256


class _Grown:
    """One tensor's buffer ``[..., capacity, D]`` and how many positions are used."""

    __slots__ = ("buffer", "used")

    def __init__(self, tensor: Tensor | None) -> None:
        self.buffer = tensor  # None, or transformers' 1-D empty placeholder, before any append
        self.used = int(tensor.shape[-2]) if tensor is not None and tensor.dim() > 1 else 0

    def view(self) -> Tensor | None:
        if self.buffer is None or self.buffer.dim() < 2:
            return self.buffer
        return self.buffer[..., : self.used, :]

    def reserve(self, room: int) -> None:
        """Make sure ``room`` more positions fit without moving (nothing before the first
        append: the first append's tensor becomes the buffer)."""
        if self.buffer is None or self.buffer.dim() < 2:
            return
        need = self.used + room
        if self.buffer.shape[-2] >= need:
            return
        shape = (
            *self.buffer.shape[:-2],
            max(need, 2 * self.buffer.shape[-2]),
            self.buffer.shape[-1],
        )
        grown = self.buffer.new_empty(shape)  # [..., capacity, D]
        grown[..., : self.used, :] = self.buffer[..., : self.used, :]
        self.buffer = grown

    def append(self, new: Tensor) -> Tensor:
        """Write ``new`` ``[..., n, D]`` after the used positions. -> all used positions."""
        if self.buffer is None or self.buffer.dim() < 2 or self.buffer.numel() == 0:
            self.buffer, self.used = new, int(new.shape[-2])
            return new
        n = int(new.shape[-2])
        self.reserve(n)
        assert self.buffer is not None
        self.buffer[..., self.used : self.used + n, :] = new
        self.used += n
        return self.buffer[..., : self.used, :]


class RoomyLayer(DynamicLayer):  # type: ignore[misc]
    """A ``DynamicLayer`` whose appends write into spare room (see the module docstring)."""

    _k: _Grown  # set through ``keys`` (DynamicLayer's __init__ assigns None first)
    _v: _Grown

    @property  # type: ignore[override]
    def keys(self) -> Tensor | None:
        return self._k.view()

    @keys.setter
    def keys(self, tensor: Tensor | None) -> None:
        self._k = _Grown(tensor)

    @property  # type: ignore[override]
    def values(self) -> Tensor | None:
        return self._v.view()

    @values.setter
    def values(self, tensor: Tensor | None) -> None:
        self._v = _Grown(tensor)

    def reserve(self, room: int) -> None:
        """Make room for ``room`` more positions (one allocation now, none per step)."""
        self._k.reserve(room)
        self._v.reserve(room)

    def update(
        self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        """Append this step's keys and values ``[S, H, n, D]``. -> all of them, ``[S, H, L, D]``."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        return self._k.append(key_states), self._v.append(value_states)


def make_roomy(cache: Any, room: int) -> None:
    """Turn each ``DynamicLayer`` of a prefilled ``DynamicCache`` into a :class:`RoomyLayer`
    holding the same keys and values, with ``room`` positions (at most :data:`FIRST_ROOM`)
    reserved."""
    for i, layer in enumerate(cache.layers):
        roomy = RoomyLayer()
        kept = {k: v for k, v in layer.__dict__.items() if k not in ("keys", "values")}
        roomy.__dict__.update(kept)  # is_initialized, device, ...
        roomy.keys, roomy.values = layer.keys, layer.values
        roomy.reserve(min(room, FIRST_ROOM))
        cache.layers[i] = roomy
