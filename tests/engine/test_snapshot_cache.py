"""The per-session snapshot cache is bounded by bytes (``LOCALSESSION_SNAPSHOT_CACHE_MB``) and
by count, least recently used evicted first; a snapshot over the whole budget is read but not
kept. Sizes are checked against the adapter's own parameter bytes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from localsession.engine.snapshots import SnapshotCache
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions


def packages(engine: TorchEngine, root: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        directory = root / f"pkg{i}"
        engine.save_package(str(directory), include_optimizer=False, merge_weights=False)
        out.append(str(directory))
    return out


def adapter_bytes(engine: TorchEngine) -> int:
    return sum(p.numel() * p.element_size() for p in engine.model.parameters() if p.requires_grad)


def cache_of(engine: TorchEngine, **kwargs: int) -> SnapshotCache:
    return SnapshotCache(engine._layout, engine._adapter, **kwargs)


def test_byte_budget_evicts_least_recently_used(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine(rank=8, alpha=16)
    one = adapter_bytes(engine)
    pkgs = packages(engine, tmp_path, 4)
    cache = cache_of(engine, budget=3 * one + one // 2)  # room for three
    a = cache.get(pkgs[0])[1]
    cache.get(pkgs[1])
    cache.get(pkgs[2])
    assert len(cache) == 3 and cache.used == 3 * one
    assert cache.get(pkgs[0])[1] is a  # a hit, now most recently used
    cache.get(pkgs[3])  # evicts pkgs[1], the least recently used
    assert len(cache) == 3 and cache.used <= cache.budget
    assert cache.get(pkgs[0])[1] is a
    before = cache.get(pkgs[1])[1]  # read again (evicted), which evicts pkgs[2]
    assert cache.get(pkgs[1])[1] is before and len(cache) == 3


def test_count_bound_and_oversized_snapshots(
    make_engine: Callable[..., TorchEngine], tmp_path: Path
) -> None:
    engine = make_engine(rank=8, alpha=16)
    one = adapter_bytes(engine)
    pkgs = packages(engine, tmp_path, 3)
    counted = cache_of(engine, size=2, budget=100 * one)
    for p in pkgs:
        counted.get(p)
    assert len(counted) == 2
    small = cache_of(engine, budget=one - 1)  # no snapshot fits: each call reads the file
    first, again = small.get(pkgs[0])[1], small.get(pkgs[0])[1]
    assert first is not again and len(small) == 0 and small.used == 0
    assert first is not None and again is not None
    assert all((first[k] == again[k]).all() for k in first)


def test_an_engine_takes_its_budget_from_its_options(
    make_engine: Callable[..., TorchEngine],
) -> None:
    assert make_engine(options=EngineOptions())._snapshots.budget == 256 * 2**20
    options = EngineOptions.parse({"LOCALSESSION_SNAPSHOT_CACHE_MB": "1.5"})
    assert make_engine(options=options)._snapshots.budget == int(1.5 * 2**20)
    for bad in ("lots", "-1"):
        with pytest.raises(ValueError, match="LOCALSESSION_SNAPSHOT_CACHE_MB"):
            EngineOptions.parse({"LOCALSESSION_SNAPSHOT_CACHE_MB": bad})
