"""Package adapter snapshots for sampling, and running the model with one in the adapter.

``sample`` / ``compute_logprobs`` with a package directory read that package's adapter, never
the live training weights (docs/semantics.md#3).

- :class:`SnapshotCache` loads a package's adapter lazily (``checkpoint.read_sampling_adapter``)
  and keeps recently used ones (LRU), keyed by the adapter file's path, inode, mtime and size,
  so a rewritten package is read again. It is bounded twice: at most ``SNAPSHOT_CACHE_SIZE``
  snapshots, and at most ``LOCALSESSION_SNAPSHOT_CACHE_MB`` of tensors per session (default
  256 MB; an adapter of rank 32 on every linear layer is about 40 MB at 135M parameters,
  about 320 MB at 8B). A snapshot larger than the whole budget is not kept: each call reads
  it again, so the bound holds whatever the adapter's size; 0 keeps nothing.
- A package of the session's own rank and alpha becomes a plain ``{parameter name: tensor}``
  (CPU, the parameter's dtype); one of another rank or alpha a :class:`ForeignSnapshot` (on
  the parameter's device, with its own LoRA scale).
- :func:`use_weights` runs a body with the base model (adapter disabled) or with a snapshot in
  the adapter, and puts the live tensors back bit for bit however the body ends.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from localsession.engine.checkpoint import (
    ADAPTER_NAME,
    ADAPTER_WEIGHTS,
    AdapterLayout,
    read_sampling_adapter,
)
from localsession.engine.merged import adapted_layers
from localsession.engine_options import EngineOptions

#: How many package snapshots ``sample`` keeps loaded (CPU memory, per engine).
SNAPSHOT_CACHE_SIZE = 8
#: Bytes of loaded snapshots per engine by default (``EngineOptions.snapshot_cache_mb``).
DEFAULT_SNAPSHOT_CACHE_BYTES = EngineOptions().snapshot_cache_bytes


#: (resolved path, inode, mtime_ns, size) of a package's adapter file
SnapshotKey = tuple[str, int, int, int]


class ForeignSnapshot(dict[str, torch.Tensor]):
    """A package adapter of another rank or alpha than the session's (``sample`` reads any):
    its own tensors (on the model's device and dtype) and its own LoRA ``scaling``."""

    scaling: float


class SnapshotCache:
    """One engine's loaded package snapshots (thread-safe; reads happen outside its lock)."""

    def __init__(
        self,
        layout: AdapterLayout,
        adapter: Mapping[str, torch.nn.Parameter],
        size: int = SNAPSHOT_CACHE_SIZE,
        budget: int | None = None,
    ) -> None:
        self._layout = layout
        self._adapter = adapter
        self._size = size
        #: bytes allowed (``EngineOptions.snapshot_cache_bytes``)
        self._budget = budget if budget is not None else DEFAULT_SNAPSHOT_CACHE_BYTES
        #: file key -> name -> tensor, least recently used first
        self._snapshots: OrderedDict[SnapshotKey, dict[str, torch.Tensor]] = OrderedDict()
        self._mutex = threading.Lock()

    def get(self, weights: str | None) -> tuple[SnapshotKey | None, dict[str, torch.Tensor] | None]:
        """(file key, adapter tensors) of package ``weights`` (cached); ``(None, None)``
        for the base."""
        if weights is None:
            return None, None
        path = Path(weights)
        key: SnapshotKey | None
        try:
            stat = (path / ADAPTER_WEIGHTS).stat()
            key = (str(path.resolve()), stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except (OSError, ValueError):
            key = None  # read_sampling_adapter below raises the package error
        with self._mutex:
            if key is not None and key in self._snapshots:
                self._snapshots.move_to_end(key)
                return key, self._snapshots[key]
        tensors, scaling = read_sampling_adapter(path, self._layout)
        snapshot: dict[str, torch.Tensor]
        if scaling is None:
            snapshot = {
                name: tensors[k].to(dtype=self._adapter[name].dtype)
                for k, name in self._layout.names.items()
            }
        else:  # swapped in whole by use_weights: on the parameter's device already
            snapshot = ForeignSnapshot(
                (name, tensors[k].to(self._adapter[name].device, self._adapter[name].dtype))
                for k, name in self._layout.names.items()
            )
            snapshot.scaling = scaling
        if key is not None:
            self._keep(key, snapshot)
        return key, snapshot

    @property
    def budget(self) -> int:
        """Bytes of snapshots this cache may hold."""
        return self._budget

    @property
    def used(self) -> int:
        """Bytes of snapshots held now."""
        with self._mutex:
            return sum(_nbytes(t) for t in self._snapshots.values())

    def __len__(self) -> int:
        with self._mutex:
            return len(self._snapshots)

    def _keep(self, key: SnapshotKey, snapshot: dict[str, torch.Tensor]) -> None:
        """Insert (most recently used), evicting least recently used ones until both bounds
        hold; a snapshot over the whole byte budget is not kept."""
        size, budget = _nbytes(snapshot), self.budget
        with self._mutex:
            self._snapshots.pop(key, None)
            if size > budget or self._size < 1:
                return
            used = sum(_nbytes(t) for t in self._snapshots.values())
            while self._snapshots and (used + size > budget or len(self._snapshots) >= self._size):
                _, evicted = self._snapshots.popitem(last=False)
                used -= _nbytes(evicted)
            self._snapshots[key] = snapshot

    def clear(self) -> None:
        """Drop every loaded snapshot."""
        with self._mutex:
            self._snapshots.clear()


def _nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


@contextmanager
def use_weights(
    model: Any,
    adapter: Mapping[str, torch.nn.Parameter],
    snapshot: dict[str, torch.Tensor] | None,
) -> Iterator[None]:
    """Run the peft ``model`` with the base model (``None``) or with ``snapshot`` in its
    ``adapter`` (live parameter name -> trainable parameter).

    The caller holds the engine's lock. The live adapter tensors are stashed and copied back
    bit for bit however the body ends. (peft's ``set_adapter`` is avoided: it flips
    ``requires_grad``.)
    """
    if snapshot is None:
        with model.disable_adapter():
            yield
        return
    if isinstance(snapshot, ForeignSnapshot):
        with foreign_weights(model, adapter, snapshot):
            yield
        return
    with torch.no_grad():
        live = {name: p.detach().clone() for name, p in adapter.items()}
        try:
            for name, p in adapter.items():
                p.copy_(snapshot[name])
            yield
        finally:
            for name, p in adapter.items():
                p.copy_(live[name])


@contextmanager
def foreign_weights(
    model: Any, adapter: Mapping[str, torch.nn.Parameter], snapshot: ForeignSnapshot
) -> Iterator[None]:
    """Run with a package of another rank/alpha in the adapter: each LoRA parameter's
    storage is swapped for the package's tensor (shapes may differ) and every LoRA layer
    takes its scale; the live storage and scales come back however the body ends."""
    layers = adapted_layers(model)
    live = {name: p.data for name, p in adapter.items()}
    scales = {name: layer.scaling[ADAPTER_NAME] for name, layer in layers.items()}
    try:
        for name, p in adapter.items():
            p.data = snapshot[name]
        for layer in layers.values():
            layer.scaling[ADAPTER_NAME] = snapshot.scaling
        yield
    finally:
        for name, p in adapter.items():
            p.data = live[name]
        for name, layer in layers.items():
            layer.scaling[ADAPTER_NAME] = scales[name]
