"""Interleaved timing for the engine's one-time kernel probes (fast_linear.py,
packed_linear.py, decode_step.py): each candidate runs once untimed, then once per round,
round by round, so a burst of load from elsewhere slows every candidate alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping


def interleaved_medians(fns: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each callable's median wall time in seconds over ``rounds`` interleaved rounds, after
    one untimed call each (caches, buffers, primitives)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
