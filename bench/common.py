"""Shared pieces of the benchmarks: the ``Row`` every script returns, timing helpers, and
the table ``make bench`` prints.

Every bench script exposes ``collect(smoke: bool) -> list[Row]`` and a ``main()`` that prints
its own rows (``--smoke`` for tiny sizes and one repetition, ``--json PATH`` to hand the rows
to ``bench/run_all.py``, which runs each script in a fresh interpreter and prints one table).

A row holds our number, the baseline's (measured in the same process run, on the same model
and batch) where there is one, the ratio, the target as text and whether it was met
(``None``: information only, no target).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    metric: str
    ours: float
    unit: str  # of ``ours`` and ``baseline``: "tok/s", "ms", "s"
    target: str  # e.g. "≥ 0.90×", "≤ 50 ms", "info"
    ok: bool | None  # None: information only
    baseline: float | None = None
    ratio: float | None = None  # as the target reads it (ours / baseline unless stated)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``Row(**d)`` restores it)."""
        return asdict(self)


def load_average() -> str:
    """The 1/5/15-minute load averages, for the notes printed beside the numbers."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # pragma: no cover - not on Linux/macOS
        return "load average unavailable"
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (wall clock)."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def interleaved(
    fns: dict[str, Callable[[], object]], runs: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Run every ``fn`` ``runs`` times, round-robin (a, b, a, b, ...), after ``warmup``
    rounds; return each one's wall times in seconds. Interleaving spreads the load of a
    shared machine over every contender instead of penalising whichever ran during a burst.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return times


def median(values: Sequence[float]) -> float:
    """The median (``statistics.median``)."""
    return float(statistics.median(values))


def paired_ratio(times: dict[str, list[float]], work: dict[str, list[int]] | None = None) -> float:
    """The median over rounds of ours/raw throughput, each round's pair run back to back (a
    burst of load on a shared machine then slows both sides of a ratio, not one). ``work``:
    units done per run (default: the same for both)."""
    ratios = []
    for k, (t_ours, t_raw) in enumerate(zip(times["ours"], times["raw"], strict=True)):
        w_ours, w_raw = (work["ours"][k], work["raw"][k]) if work else (1, 1)
        ratios.append((w_ours / t_ours) / (w_raw / t_raw))
    return median(ratios)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None or math.isnan(value):  # NaN: a row that could not be measured
        return "—"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def render(rows: Iterable[Row], title: str | None = None) -> str:
    """The table (metric, ours, baseline, ratio, target, result) and a closing line."""
    rows = list(rows)
    header = ("metric", "ours", "baseline", "ratio", "target", "result")
    cells = [
        (
            r.metric,
            _fmt(r.ours, r.unit),
            _fmt(r.baseline, r.unit),
            _fmt(r.ratio) + "×" if r.ratio is not None else "—",
            r.target,
            {True: "pass", False: "MISS", None: "info"}[r.ok],
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]
    lines = [title] if title else []
    for k, line in enumerate([header, *cells]):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 or i == 4 else c.rjust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """The closing pass/miss line."""
    judged = [r for r in rows if r.ok is not None]
    missed = [r.metric for r in judged if not r.ok]
    passed = len(judged) - len(missed)
    if not missed:
        return f"pass: {passed}/{len(judged)} targets met"
    return f"MISS: {passed}/{len(judged)} targets met; missed: {'; '.join(missed)}"


def bench_args(description: str | None) -> argparse.ArgumentParser:
    """An argument parser with the flags every bench script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    return parser


def emit(rows: Sequence[Row], args: argparse.Namespace, title: str) -> None:
    """Print the script's own table, and write the rows as JSON when asked to."""
    print(render(rows, f"{title} ({load_average()})"))
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in rows]))


def read_rows(path: Path) -> list[Row]:
    """Rows written by :func:`emit`."""
    return [Row(**d) for d in json.loads(path.read_text())]
