"""A thread that is about to wait hands its OpenMP worker threads back.

torch runs its CPU kernels on OpenMP (libgomp in the Linux wheels, libomp on macOS). Each
thread that runs a parallel kernel gets a team of worker threads of its own, kept until that
thread ends. Once a process holds more OpenMP threads than it has CPUs, libgomp stops letting
idle workers spin: they sleep after every parallel region, so every matmul then pays for
waking them. On a 2-CPU VM, a 1×8-token forward + backward on tiny went from 6 to 30 ms as
soon as a session's worker had loaded its model and kept its team. That was as true of the
user's own torch code in the same process as of ours.

So :func:`release` is called by:
- a session's worker, after loading its model and whenever it waits for an op;
- the sampler, whenever its queue is empty;
- a caller about to block on (or await) an op that another thread runs: its team would
  only slow that thread down while it waits.

Then only the threads that are working hold teams. A thread that gave its team back builds a
new one at its next parallel kernel, which costs ~0.1 ms on that 2-CPU VM.

``omp_pause_resource_all`` (OpenMP 5.0) does this. It frees the calling thread's team and
nothing of other threads'. It is looked up in the OpenMP runtime the process has already
loaded (never loading one); without torch, or with a runtime that lacks it, :func:`release`
does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["release"]

#: OpenMP's ``omp_pause_soft``: free the threads, keep what cannot be rebuilt.
_PAUSE_SOFT = 1
#: File names of the OpenMP runtimes torch ships or links (GNU, LLVM, Intel).
_RUNTIMES = ("libgomp", "libomp", "libiomp5")

_pause: Callable[[int], int] | None = None
_looked = False


def _loaded_runtimes() -> list[str]:
    """Paths (or, without ``/proc``, bare names) of the OpenMP runtimes to look in."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return ["libomp.dylib", "libgomp.so.1", "libiomp5.so"]
    paths = {line.split(maxsplit=5)[-1] for line in maps.read_text().splitlines()}
    return sorted(p for p in paths if Path(p).name.startswith(_RUNTIMES))


def _find_pause() -> Callable[[int], int] | None:
    """``omp_pause_resource_all`` of an OpenMP runtime already in the process, or None."""
    no_load = getattr(os, "RTLD_NOLOAD", None)
    if no_load is None:  # Windows: no way to look without loading
        return None
    for path in _loaded_runtimes():
        try:
            library = ctypes.CDLL(path, mode=no_load)
        except OSError:  # not loaded after all
            continue
        pause = getattr(library, "omp_pause_resource_all", None)
        if pause is not None:
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            return pause  # type: ignore[no-any-return]
    return None


def release() -> None:
    """Free the calling thread's OpenMP worker threads (none held: nothing to do). Call it
    only from a thread about to wait, never from inside a parallel region."""
    global _pause, _looked
    if not _looked:
        if "torch._C" not in sys.modules:  # torch's libraries (and OpenMP) not loaded yet
            return
        _pause, _looked = _find_pause(), True
    if _pause is not None:
        _pause(_PAUSE_SOFT)
