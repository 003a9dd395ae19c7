"""The kernel probes' timing (engine/probe_timing.py) on a fake clock, against hand values."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localsession.engine import probe_timing


def test_medians_and_the_geometric_mean_speedup(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(probe_timing.time, "perf_counter", lambda: now[0])
    calls: list[str] = []

    def taking(name: str, *seconds: float) -> Callable[[], None]:
        left = list(seconds)

        def run() -> None:
            calls.append(name)
            now[0] += left.pop(0)

        return run

    # an untimed first call each, then rounds interleaved; medians 3 and 1
    medians = probe_timing.interleaved_medians(
        {"a": taking("a", 99, 3, 9, 2), "b": taking("b", 99, 1, 1, 5)}, rounds=3
    )
    assert medians == {"a": 3, "b": 1}
    assert calls == ["a", "b"] * 4
    trials = [(taking("x", 0, 4), taking("y", 0, 1)), (taking("x", 0, 2), taking("y", 0, 2))]
    assert probe_timing.geomean_speedup(trials, rounds=1) == 2.0  # sqrt(4/1 * 2/2)
