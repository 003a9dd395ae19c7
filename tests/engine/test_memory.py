"""engine/memory.py: a large op marks its thread's arena; only an op on another thread trims."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from localsession.engine import memory
from localsession.engine_options import EngineOptions

BIG = memory.TRIM_MIN_BYTES + 1


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record each trim (by thread) instead of calling glibc; start with nothing marked."""
    calls: list[int] = []

    def fake_trim() -> bool:
        calls.append(threading.get_ident())
        return True

    monkeypatch.setattr(memory, "trim", fake_trim)
    monkeypatch.setattr(memory, "_marked_thread", None)
    return calls


def on_other_thread(fn: Callable[[], bool]) -> bool:
    out: list[bool] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def test_the_same_thread_reuses_its_arena_without_trimming(trims: list[int]) -> None:
    for _ in range(3):
        assert memory.before_op() is False
        memory.after_op(BIG)
    assert trims == []


def test_another_thread_trims_once_before_its_op(trims: list[int]) -> None:
    memory.after_op(BIG)
    assert on_other_thread(memory.before_op) is True
    assert len(trims) == 1 and trims[0] != threading.get_ident()
    # handed back: neither thread trims again until a large op marks an arena
    assert on_other_thread(memory.before_op) is False
    assert memory.before_op() is False
    assert len(trims) == 1


def test_small_ops_mark_nothing(trims: list[int]) -> None:
    memory.after_op(memory.TRIM_MIN_BYTES)
    assert on_other_thread(memory.before_op) is False
    assert trims == []


def test_the_real_trim_runs_on_glibc() -> None:
    if memory._libc() is None:
        pytest.skip("not glibc: trim is a no-op by design")
    assert memory.trim() is True


def test_budget_options_in_bytes() -> None:
    """The two cache budgets: MB as given (0 allowed), in bytes; bad values name the variable."""
    name = "LOCALSESSION_MERGED_CACHE_MB"
    assert EngineOptions.parse({}).merged_cache_bytes == 512 * 2**20
    assert EngineOptions.parse({name: "0"}).merged_cache_bytes == 0
    assert EngineOptions.parse({name: "0.5"}).merged_cache_bytes == 2**19
    for bad in ("lots", "-1", "nan"):
        with pytest.raises(ValueError, match=f"{name}={bad!r}"):
            EngineOptions.parse({name: bad})
