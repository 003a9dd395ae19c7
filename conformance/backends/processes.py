"""Child processes that never outlive whoever started them.

:func:`start` runs a command and remembers it until :func:`stop`; whatever is still running
when the interpreter exits (an exception, Ctrl-C, a SIGTERM from a test harness) is stopped
then (:func:`stop_all`, installed by :func:`start`). :func:`stop` asks politely (SIGTERM),
waits up to ``grace`` seconds, then kills.

``own_group=True`` starts the child as the leader of a new process group and stops the whole
group, so the child's own children go with it: that is how the test suite runs a
conformance run (which starts a server of its own). ``--backend=http`` starts its
``localsession serve`` in the conformance run's group instead (``own_group=False``), so a
harness that stops the run's group stops the server with it, even when the run itself was
killed and could not clean up.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

#: Seconds a child may take to exit after SIGTERM before it is killed.
GRACE_S = 20.0

_running: dict[int, tuple[subprocess.Popen[Any], bool]] = {}
_mutex = threading.Lock()
_installed = False


def start(args: Sequence[str], *, own_group: bool = False, **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)``, remembered until :func:`stop`."""
    _install()
    proc: subprocess.Popen[Any] = subprocess.Popen(list(args), start_new_session=own_group, **popen)
    with _mutex:
        _running[proc.pid] = (proc, own_group)
    return proc


def _signal(proc: subprocess.Popen[Any], group: bool, number: int) -> None:
    try:
        if group:
            os.killpg(proc.pid, number)  # the group outlives its leader while members live
        elif proc.poll() is None:
            proc.send_signal(number)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen[Any], grace: float = GRACE_S) -> int:
    """Stop ``proc`` (and its group, if it leads one): SIGTERM, then SIGKILL after ``grace``
    seconds; its exit status."""
    with _mutex:
        _, group = _running.pop(proc.pid, (proc, False))
    _signal(proc, group, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal(proc, group, signal.SIGKILL)
        proc.wait()
    if group:  # a member that ignored SIGTERM, or one started during the leader's exit
        _signal(proc, group, signal.SIGKILL)
        _wait_gone(proc.pid, grace)
    return int(proc.returncode)


def _wait_gone(group: int, grace: float) -> None:
    """Wait (up to ``grace`` s) until no process of ``group`` is left: a signal is delivered
    after ``killpg`` returns, and an orphan is reaped by whoever adopted it."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def stop_all() -> None:
    """Stop every child still running (at interpreter exit)."""
    with _mutex:
        procs = [proc for proc, _ in _running.values()]
    for proc in procs:
        stop(proc, grace=5.0)


def _on_sigterm(number: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so ``finally`` blocks and :func:`stop_all` run."""
    raise KeyboardInterrupt(f"signal {number}")


def _install() -> None:
    """At the first start: :func:`stop_all` at exit, and SIGTERM made to unwind (only where
    nobody installed a handler of their own, and only from the main thread)."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
