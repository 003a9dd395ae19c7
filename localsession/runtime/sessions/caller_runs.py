"""When a caller waiting on its training op may run that op on its own thread.

An in-process ``result()`` with no timeout would otherwise hand the op to the session's
worker and sleep until the worker hands the result back: two thread wake-ups, and the op's
Python runs on a thread whose caches went cold while it slept. For a short op (a 1×8
``forward_backward`` on a tiny model takes ~8 ms) that hand-off was a few tenths of a
millisecond, a visible share. So the session lets the waiting caller run the ops up to its
own, when all of these hold (``Session.run_here``):

- the session is Running, no op is running and the next ones are queued without a gap;
- each op's kind ran in at most ``QUICK_S`` the last time (a long op stays on the worker,
  where the caller's Ctrl-C interrupts its wait at once);
- the engine says the calling thread's state is its worker's (``Engine.runs_in_caller``:
  for torch, no ``no_grad``, ``inference_mode``, autocast or device context the caller
  opened, and CUDA's device 0 and default stream current);
- a Ctrl-C cannot land half-way through: off the main thread none is delivered, and on it
  :func:`interrupts_held` holds the first one until the op has finished.

Otherwise the caller waits for the worker, as before. Either way the ops run one at a time,
in sequence order, through the same ``Session._run_one``.

Waking the worker at every submit costs too: it needs the GIL to see that the caller already
runs the op, and takes it from the caller mid-op (~0.1 ms a 1×8 op on tiny). So once
``CALLERS_IN_A_ROW`` ops in a row ran on their callers, a submit to a Running session leaves
the worker asleep, and the worker instead:

- is woken by anyone who starts to wait on a training op (``Session.wake_worker``): a caller
  whose op may not run here, a ``result(timeout=...)``, an ``await``, a server's long poll;
- looks every ``LOOKOUT_S`` for an op no one came for (submitted and left, to overlap other
  work), runs it, and from then on is woken by every submit again, as it is once the
  session has been idle for ``IDLE_S``.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
from types import FrameType
from typing import Any

#: An op kind that last ran in at most this many seconds may run on the waiting caller.
QUICK_S = 0.1
#: After this many training ops in a row ran on their callers, submits stop waking the worker.
CALLERS_IN_A_ROW = 2
#: How often a worker that submits no longer wake looks for an op no one came for...
LOOKOUT_S = 0.1
#: ...until the session has been idle this long: submits wake it again from then on.
IDLE_S = 1.0

#: The C functions under ``signal.signal`` and ``signal.getsignal``, which convert numbers and
#: handlers to and from enums: ~15 µs for the three calls below, a visible share of a 1×8
#: ``forward_backward`` on a tiny model, against ~1 µs here.
_c_signal: Any = importlib.import_module("_signal")

#: The main thread's ident (the only thread signals reach), read once: the forking thread
#: becomes a child's main thread.
_main_thread = [threading.main_thread().ident]
os.register_at_fork(after_in_child=lambda: _main_thread.__setitem__(0, threading.get_ident()))


class interrupts_held:  # lower case, as contextlib.suppress: used like a function
    """``with interrupts_held() as held``: ``held`` says whether a Ctrl-C cannot interrupt
    the block. On the main thread with Python's default SIGINT handler, the first Ctrl-C is
    held and raised as ``KeyboardInterrupt`` once the block ends (a second one raises at
    once, as usual); other threads get no signals. With any other handler installed, held is
    False and nothing changes. (A class rather than a generator: it is entered on every op.)
    """

    def __enter__(self) -> bool:
        self._caught: list[int] | None = None
        if threading.get_ident() != _main_thread[0]:
            return True
        if _c_signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False  # another handler is installed: it is left alone
        caught = self._caught = []

        def hold(signum: int, frame: FrameType | None) -> None:
            caught.append(signum)
            _c_signal.signal(signal.SIGINT, signal.default_int_handler)  # the next one raises

        _c_signal.signal(signal.SIGINT, hold)
        return True

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self._caught is None:
            return
        _c_signal.signal(signal.SIGINT, signal.default_int_handler)
        if self._caught and kind is None:  # a block that raised keeps its own exception
            raise KeyboardInterrupt
