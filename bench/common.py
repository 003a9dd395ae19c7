"""Shared pieces of the benchmarks: the ``Row`` every script returns, timing helpers, and
the tables ``make bench`` (bench/headline.py) and ``make bench-full`` print.

Every bench script exposes ``collect(smoke: bool) -> list[Row]`` and a ``main()`` that prints
its own rows (``--smoke`` for tiny sizes and one repetition, ``--json PATH`` to hand the rows
to ``bench/run_all.py``, which runs each script in a fresh interpreter and prints one table).

A row holds our number, the baseline's (measured in the same process run, on the same model
and batch) where there is one, the ratio, the target as text and whether it was met
(``None``: information only, no target). A paired row also keeps each round's ratio
(``rounds``): its spread is their interquartile range, and a row whose spread crosses its
target reads "noisy", neither pass nor MISS. Every row carries the 1-minute load average
before and after it was measured (``load``), and a row that cannot apply on this machine
says why (``na``, e.g. "no AMX-BF16").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
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
    rounds: list[float] | None = None  # each paired round's ratio (``ratio`` is their median)
    load: list[float] | None = None  # the 1-minute load average [before, after]
    na: str | None = None  # why the target does not apply here (result "n/a: ...")

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``Row(**d)`` restores it)."""
        return asdict(self)

    def spread(self) -> tuple[float, float] | None:
        """The interquartile range of ``rounds`` (None without rounds)."""
        if not self.rounds:
            return None
        return quantile(self.rounds, 0.25), quantile(self.rounds, 0.75)

    @property
    def noisy(self) -> bool:
        """Whether the spread of the rounds crosses a ratio target ("≥ 1.3×", "≤ 1.15×")."""
        bound, spread = target_bound(self.target), self.spread()
        if self.ok is None or self.na is not None or bound is None or spread is None:
            return False
        low, high = spread
        return low < bound[1] <= high if bound[0] == "≥" else low <= bound[1] < high

    @property
    def result(self) -> str:
        """ "pass", "MISS", "noisy", "info" or "n/a: <why>"."""
        if self.na is not None:
            return f"n/a: {self.na}"
        if self.ok is None:
            return "info"
        return "noisy" if self.noisy else ("pass" if self.ok else "MISS")


_BOUND = re.compile(r"^([≥≤]) *([0-9.]+) *×$")


def target_bound(target: str) -> tuple[str, float] | None:
    """("≥" or "≤", value) of a plain ratio target such as "≥ 1.3×"; None for any other."""
    found = _BOUND.match(target.strip())
    return (found.group(1), float(found.group(2))) if found else None


def meets(target: str, value: float) -> bool:
    """Whether ``value`` meets the plain ratio target ``target`` ("≥ 2×")."""
    bound = target_bound(target)
    if bound is None:
        raise ValueError(f"target {target!r} is not of the form '≥ 1.3×' or '≤ 1.15×'")
    return value >= bound[1] if bound[0] == "≥" else value <= bound[1]


def load1() -> float:
    """The 1-minute load average (NaN where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - not on Linux/macOS
        return float("nan")


def stamp(rows: Iterable[Row], before: float) -> list[Row]:
    """``rows`` with ``load`` set to [``before``, now] where they carry none yet."""
    after = load1()
    return [r if r.load is not None else replace(r, load=[before, after]) for r in rows]


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


def reported(fns: Mapping[str, Callable[[], object]], part: str) -> dict[str, Callable[[], object]]:
    """``fns``, each printing its wall time and the load as it ends (a long run's progress)."""

    def wrap(name: str, fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            started = time.perf_counter()
            out = fn()
            took = time.perf_counter() - started
            print(f"  {part} {name}: {took:.1f} s (1-minute load {load1():.2f})", flush=True)
            return out

        return run

    return {name: wrap(name, fn) for name, fn in fns.items()}


def median(values: Sequence[float]) -> float:
    """The median (``statistics.median``)."""
    return float(statistics.median(values))


def paired_ratios(
    times: dict[str, list[float]],
    work: dict[str, list[int]] | None = None,
    sides: tuple[str, str] = ("ours", "raw"),
) -> list[float]:
    """Each round's throughput ratio of ``sides[0]`` to ``sides[1]``, the round's pair run
    back to back (a burst of load on a shared machine then slows both sides of a ratio, not
    one). ``work``: units done per run (default: the same for both)."""
    mine, theirs = sides
    ratios = []
    for k, (t_ours, t_raw) in enumerate(zip(times[mine], times[theirs], strict=True)):
        w_ours, w_raw = (work[mine][k], work[theirs][k]) if work else (1, 1)
        ratios.append((w_ours / t_ours) / (w_raw / t_raw))
    return ratios


def paired_rates(
    times: dict[str, list[float]], counts: dict[str, list[int]]
) -> tuple[list[float], dict[str, float]]:
    """(each round's ratio ours/raw, each side's median tokens/s) of an :func:`interleaved`
    run whose functions appended their tokens per call to ``counts``: the warm-up calls'
    counts come first and are dropped, keeping the last ``len(times[side])`` of each side."""
    done = {k: v[len(v) - len(times[k]) :] for k, v in counts.items()}
    rates = {k: median([n / t for n, t in zip(done[k], times[k], strict=True)]) for k in done}
    return paired_ratios(times, done), rates


def paired_ratio(times: dict[str, list[float]], work: dict[str, list[int]] | None = None) -> float:
    """The median of :func:`paired_ratios` (ours against raw)."""
    return median(paired_ratios(times, work))


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
    elif 0 < abs(value) < 0.01:  # a small distance, not a zero
        text = f"{value:.1e}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def _spread(row: Row) -> str:
    spread = row.spread()
    return "—" if spread is None else f"{_fmt(spread[0])}–{_fmt(spread[1])}×"


def _load(row: Row) -> str:
    return "—" if row.load is None else f"{_fmt(row.load[0])}→{_fmt(row.load[1])}"


HEADER = ("metric", "ours", "baseline", "ratio", "spread", "target", "result", "load")


def cells(row: Row) -> tuple[str, ...]:
    """The row's table cells, in ``HEADER`` order."""
    return (
        row.metric,
        _fmt(row.ours, row.unit),
        _fmt(row.baseline, row.unit),
        _fmt(row.ratio) + "×" if row.ratio is not None else "—",
        _spread(row),
        row.target,
        row.result,
        _load(row),
    )


def render(rows: Iterable[Row], title: str | None = None) -> str:
    """The table (metric, ours, baseline, ratio, spread of the rounds' ratios, target,
    result, 1-minute load before→after) and a closing line."""
    rows = list(rows)
    table = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in table) for i in range(len(HEADER))]
    lines = [title] if title else []
    left = {0, 5, 6}  # metric, target, result
    for k, line in enumerate(table):
        lines.append(
            "  ".join(
                c.ljust(w) if i in left else c.rjust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """The closing line: "MISS" when a target was missed, else "noisy" when a row's spread
    crossed its target, else "pass"; n/a and info rows are not counted."""
    judged = [r for r in rows if r.ok is not None and r.na is None]
    missed = [r.metric for r in judged if r.result == "MISS"]
    noisy = [r.metric for r in judged if r.result == "noisy"]
    passed = len(judged) - len(missed) - len(noisy)
    head = "MISS" if missed else "noisy" if noisy else "pass"
    line = f"{head}: {passed}/{len(judged)} targets met"
    if missed:
        line += f"; missed: {'; '.join(missed)}"
    if noisy:
        line += f"; noisy: {'; '.join(noisy)}"
    return line


def bench_args(description: str | None) -> argparse.ArgumentParser:
    """An argument parser with the flags every bench script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    return parser


def emit(rows: Sequence[Row], args: argparse.Namespace, title: str) -> None:
    """Print the script's own table, and write the rows as JSON when asked to."""
    from localsession.engine_options import EngineOptions

    engine = EngineOptions.from_env().line()  # what the script's services read
    print(render(rows, f"{title} ({load_average()}; engine: {engine})"))
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in rows]))


def read_rows(path: Path) -> list[Row]:
    """Rows written by :func:`emit`."""
    return [Row(**d) for d in json.loads(path.read_text())]
