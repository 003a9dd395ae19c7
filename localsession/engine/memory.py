"""Give freed heap memory back to the operating system after large CPU ops.

PyTorch's CPU allocator takes tensors from ``malloc``. glibc serves each thread from its own
arena and, once large blocks have been freed, raises its mmap threshold, so the gigabytes of
activations one training step frees stay in that thread's arena. Every session trains on
its own worker thread, so without help N sessions hold N step-peaks of RSS long after their
steps ended, which defeats sharing the base. :func:`trim` asks glibc (``malloc_trim(0)``,
which walks every arena) to return free pages; elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from functools import lru_cache
from typing import Any

#: Ops whose tensors exceed this many bytes are followed by a trim (on the CPU).
TRIM_MIN_BYTES = 64 * 2**20

_lock = threading.Lock()


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


def trim_after(bytes_touched: int) -> None:
    """:func:`trim` if an op worked on more than ``TRIM_MIN_BYTES`` of tensors."""
    if bytes_touched > TRIM_MIN_BYTES:
        trim()
