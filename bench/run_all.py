"""``make bench-full``: run every ``bench/bench_*.py`` and print one table.

Each script runs in a fresh interpreter (so one benchmark's threads, caches and allocator
state cannot colour the next) with ``--json``; its rows are gathered into one table of
metric, ours, baseline, ratio, target and result, closed by a pass/miss line. The load
average is printed before and after, and a row that does not carry its own 1-minute load
before and after gets its script's: on a shared machine it says how much to trust the run.
``make bench`` runs only the headline rows (bench/headline.py).
Exits non-zero only when a script fails; a missed target is reported in the table.

Run: python bench/run_all.py [--smoke] [--only training sampling ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, load1, load_average, read_rows, render, stamp  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent


def scripts(only: list[str] | None = None) -> list[Path]:
    """Every ``bench_*.py``, in name order (``only``: just those named ``bench_<x>.py``)."""
    found = sorted(BENCH_DIR.glob("bench_*.py"))
    if only:
        found = [p for p in found if p.stem.removeprefix("bench_") in only]
    return found


def run(script: Path, smoke: bool, out_dir: Path) -> tuple[list[Row], float]:
    """Run one script in a fresh interpreter; return its rows and wall seconds."""
    out = out_dir / f"{script.stem}.json"
    command = [sys.executable, str(script), "--json", str(out)] + (["--smoke"] if smoke else [])
    started, before = time.perf_counter(), load1()
    subprocess.run(command, check=True, cwd=BENCH_DIR.parent)
    return stamp(read_rows(out), before), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--only", nargs="+", help="script names without bench_ (e.g. training)")
    args = parser.parse_args()
    before = load_average()
    rows: list[Row] = []
    walls: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        for script in scripts(args.only):
            print(f"== {script.name}", flush=True)
            got, wall = run(script, args.smoke, Path(out_dir))
            rows += got
            walls.append(f"{script.stem.removeprefix('bench_')} {wall:.0f}s")
    print()
    print(render(rows, f"localsession benchmarks (before: {before}; after: {load_average()})"))
    print(f"took {time.perf_counter() - started:.0f}s ({', '.join(walls)})")


if __name__ == "__main__":
    main()
