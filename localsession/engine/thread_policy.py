"""How many torch threads a decode or a training op runs on: what the process can get now.

torch runs a CPU kernel on an OpenMP team of ``torch.get_num_threads()`` threads, and each
parallel region waits for its slowest thread. When other processes keep the cores busy, one
of the team is always waiting for a core, and every kernel waits with it: one 731-token
sampling call on SmolLM2 took 162-203 s on 2 threads at load 10-12 on a 2-CPU VM, against
13-39 s on 1 thread. So the engine picks the count per op, and the decoder revisits it while
it decodes (:func:`revisit`, every ``REVISIT_S`` seconds at most).

The choice (:func:`choose_threads`, a pure function) rests on:

- the CPUs the process may run on: its affinity mask, a cgroup CPU quota, and torch's own
  thread count when the first op ran (``OMP_NUM_THREADS``, ``torch.set_num_threads``), the
  least of the three;
- how many cores' worth of CPU time *other* processes used over the last window: the busy
  time ``/proc/stat`` reports for those CPUs less this process's own CPU time
  (:class:`CpuMonitor`, whose first window opens when the engine is imported, so the first
  op already has one; the 1-minute load average, which counts this process too, stands in
  only where no window is open yet);
- how many threads of this process run ops at once (a sampler beside a training op): the
  free cores are shared between them.

A count goes up only when the extra core is nearly free (``UP_SLACK``) and down once the
cores it uses are clearly contended (``KEEP_SLACK``), so it does not flap between two counts.

``LOCALSESSION_THREADS`` (``EngineOptions.threads``, passed to :func:`scope`) chooses: ``auto``
(the default) as above, or a whole number of threads every op uses.
An op's thread count is set on the thread that runs it and restored when the op ends, so a
caller's own thread (runtime/sessions/runner.py) keeps its setting. A changed count can
change a matmul's reduction order, hence float rounding (docs/semantics.md, "Determinism"):
pin the count where bit-identical results across loads matter.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

THREADS_ENV = "LOCALSESSION_THREADS"
#: A count rises only when every core it adds is at least this close to free (cores)...
UP_SLACK = 0.15
#: ...and falls once the cores it uses are more than this much busy with other work.
KEEP_SLACK = 0.5
#: Least seconds between two looks at the cores (a decode step is ~10-100 ms).
REVISIT_S = 0.5
#: A window shorter than this (seconds) is too coarse for /proc/stat's 10 ms ticks.
MIN_WINDOW_S = 0.2


def choose_threads(cpus: int, others_busy: float, current: int, peers: int = 1) -> int:
    """The thread count for an op.

    ``cpus``: CPUs the process may use (at least 1); ``others_busy``: cores' worth of CPU
    time other processes took over the last window (0 to ``cpus``); ``current``: the count in
    use now; ``peers``: this process's threads running ops at once, this one included.
    """
    if cpus < 1 or current < 1 or peers < 1:
        raise ValueError(f"cpus, current and peers must be >= 1, got {cpus}, {current}, {peers}")
    free = max(0.0, cpus - max(0.0, others_busy)) / peers  # cores this op may count on
    keep = math.floor(free + KEEP_SLACK)  # the most it keeps
    up = math.floor(free + UP_SLACK)  # the least it rises to
    chosen = keep if current > keep else max(current, up)
    return max(1, min(cpus, chosen))


def _quota_cpus() -> int | None:
    """CPUs a cgroup CPU quota allows (v2 ``cpu.max`` or v1 CFS files), or None."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        v1 = Path("/sys/fs/cgroup/cpu")
        quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
        period_us = int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 else None


def affinity() -> set[int]:
    """The CPUs this process may run on."""
    getter = getattr(os, "sched_getaffinity", None)
    return set(getter(0)) if getter is not None else set(range(os.cpu_count() or 1))


@dataclass
class _Reading:
    at: float  # time.monotonic()
    busy_ticks: int  # busy ticks of the affinity CPUs, /proc/stat
    own_s: float  # this process's CPU seconds


class CpuMonitor:
    """Cores' worth of CPU time other processes used lately, from ``/proc/stat``."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self._stat = stat
        self._window_lock = threading.Lock()
        self._cpus = sorted(affinity())
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._estimate: float | None = None
        self._last: _Reading | None = self._read()  # the first window opens now

    def _read(self) -> _Reading | None:
        try:
            lines = self._stat.read_text().splitlines()
        except OSError:
            return None
        wanted = {f"cpu{c}" for c in self._cpus}
        busy = 0
        for line in lines:
            name, *fields = line.split()
            if name in wanted:
                # user nice system idle iowait irq softirq steal: busy is all but idle, iowait
                ticks = [int(f) for f in fields[:8]]
                busy += sum(ticks) - ticks[3] - ticks[4]
        return _Reading(time.monotonic(), busy, time.process_time())

    def others_busy(self) -> float:
        """Other processes' CPU use over the window since the last look, in cores (the last
        estimate while that window is under ``MIN_WINDOW_S``; before any such estimate, the
        1-minute load average)."""
        with self._window_lock:
            now = time.monotonic()
            if self._last is not None and now - self._last.at < MIN_WINDOW_S:
                return self._fallback() if self._estimate is None else self._estimate
            reading = self._read()
            if reading is None:
                return self._fallback()
            if self._last is None:
                self._last = reading
                self._estimate = self._fallback()
                return self._estimate
            window = reading.at - self._last.at
            busy_s = (reading.busy_ticks - self._last.busy_ticks) / self._tick
            own_s = reading.own_s - self._last.own_s
            self._last = reading
            self._estimate = min(float(len(self._cpus)), max(0.0, (busy_s - own_s) / window))
            return self._estimate

    def _fallback(self) -> float:
        try:
            return min(float(len(self._cpus)), os.getloadavg()[0])
        except OSError:
            return 0.0


_MONITOR = CpuMonitor()
_lock = threading.Lock()
_ceiling: int | None = None  # torch's thread count before this module first set one
_quota: int | None = None  # a cgroup quota's CPUs (read with the ceiling)
_peers = 0  # threads inside a ``scope`` now
_chosen: int | None = None  # the last count chosen (hysteresis carries across ops)
_local = threading.local()


def _cpus() -> int:
    """CPUs an op may use: affinity, quota and torch's first thread count (caller holds
    ``_lock``)."""
    global _ceiling, _quota
    if _ceiling is None:
        _ceiling, _quota = torch.get_num_threads(), _quota_cpus()
    limit = min(len(affinity()), _ceiling)
    return max(1, min(limit, _quota) if _quota is not None else limit)


@dataclass
class _Scope:
    fixed: int | None  # LOCALSESSION_THREADS=N, else None (auto)
    cpus: int
    due: float = 0.0  # monotonic time of the next look


def _apply(state: _Scope, current: int) -> None:
    global _chosen
    if state.fixed is not None:
        wanted = state.fixed
    else:
        with _lock:
            peers = max(1, _peers)
        wanted = choose_threads(state.cpus, _MONITOR.others_busy(), current, peers)
        _chosen = wanted
    if wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
    state.due = time.monotonic() + REVISIT_S


@contextmanager
def scope(fixed: int | None = None) -> Iterator[None]:
    """Run an op on the calling thread with the thread count chosen for it (module
    docstring), or ``fixed`` threads (``EngineOptions.threads``), restored afterwards.
    Nested scopes on one thread are the outer one."""
    if getattr(_local, "state", None) is not None:
        yield
        return
    global _peers
    before = torch.get_num_threads()
    with _lock:
        cpus = _cpus()
        _peers += 1
    state = _Scope(fixed, cpus)
    _local.state = state
    try:
        _apply(state, min(_chosen or before, cpus))
        yield
    finally:
        _local.state = None
        with _lock:
            _peers -= 1
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def revisit() -> None:
    """Look again, at most every ``REVISIT_S``: a long op (a decode loop) calls it between
    steps. Outside a :func:`scope`, or with a fixed count, it does nothing."""
    state: _Scope | None = getattr(_local, "state", None)
    if state is None or state.fixed is not None or time.monotonic() < state.due:
        return
    _apply(state, torch.get_num_threads())
