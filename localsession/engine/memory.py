"""Give freed heap memory back to the operating system when another thread needs it.

PyTorch's CPU allocator takes tensors from ``malloc``. glibc serves each thread from its own
arena and, once large blocks have been freed, raises its mmap threshold, so the gigabytes of
activations one training step frees stay in that thread's arena. Every session trains on
its own worker thread (and samples on the scheduler's), so without help N sessions hold N
step-peaks of RSS long after their steps ended, which defeats sharing the base.

:func:`trim` asks glibc (``malloc_trim(0)``, which walks every arena) to return free pages;
elsewhere it does nothing. It is not free: the trim itself, and the page faults of the next
op that grows the heap again, cost a 135M-parameter 8×256 training step about 0.5 s of its
~9 s on 2 cores. So a large op only marks its thread's arena (:func:`after_op`), and the next
op on *another* thread trims first (:func:`before_op`). A loop that keeps training on one
session reuses its arena with no trim; a switch to another session, or to sampling, starts
with the previous op's peak handed back, so peaks of different threads never add up.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from functools import lru_cache
from typing import Any

#: Ops whose tensors exceed this many bytes mark their thread's arena for a trim.
TRIM_MIN_BYTES = 64 * 2**20

_lock = threading.Lock()
#: The thread whose large op last freed memory into its arena (None: nothing to hand back).
_marked_thread: int | None = None


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def trim() -> bool:
    """Return free heap pages to the OS; False where unsupported (not glibc)."""
    libc = _libc()
    if libc is None:
        return False
    with _lock:
        libc.malloc_trim(0)
    return True


def after_op(bytes_touched: int) -> None:
    """Mark this thread's arena if the op just ended worked on more than ``TRIM_MIN_BYTES``."""
    global _marked_thread
    if bytes_touched > TRIM_MIN_BYTES:
        with _lock:
            _marked_thread = threading.get_ident()


def before_op() -> bool:
    """:func:`trim` if another thread's large op left its peak in that thread's arena;
    returns whether it trimmed. The usual case, no mark, is read without the lock: a mark
    set while this runs belongs to an op that ran alongside, which this one need not undo."""
    return _marked_thread is not None and _take_mark() and trim()


def _take_mark() -> bool:
    """Clear another thread's mark; whether there was one."""
    global _marked_thread
    with _lock:
        if _marked_thread in (None, threading.get_ident()):
            return False
        _marked_thread = None
    return True
