"""Interleaved timing for the engine's one-time kernel probes (fast_linear.py,
packed_linear.py, decode_step.py): each candidate runs once untimed, then once per round,
round by round, so a burst of load from elsewhere slows every candidate alike."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence


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


def geomean_speedup(
    trials: Sequence[tuple[Callable[[], object], Callable[[], object]]], rounds: int
) -> float:
    """How many times faster each trial's candidate runs than its baseline (median over
    ``rounds`` interleaved rounds), the geometric mean over ``trials`` of (baseline,
    candidate) pairs, rounded to 2 places: the figure a probe prints is the one it decides by."""
    log_sum = 0.0
    for baseline, candidate in trials:
        medians = interleaved_medians({"baseline": baseline, "candidate": candidate}, rounds)
        log_sum += math.log(medians["baseline"] / medians["candidate"])
    return round(math.exp(log_sum / len(trials)), 2)
