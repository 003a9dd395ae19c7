"""Who runs a session's training ops, and when: its worker thread or a caller waiting on one.

Training ops run one at a time, strictly in sequence-number order (docs/semantics.md#4),
always through :meth:`Runner.run_one`; what an op does is runtime/sessions/run_op.py's, and
which op is next is the session's ``TrainingQueue``'s. This module decides the rest:

**The worker.** Each session has one thread (:meth:`Runner.start`). It makes the engine
(Created -> Running, or Failed with the reason), then takes the op holding the next sequence
number, waiting Blocked while a missing number holds later ops, until the session ends; it
closes the engine once no caller is still running an op.

**A caller runs its own op.** An in-process ``result()`` with no timeout would otherwise hand
the op to the worker and sleep until the worker hands the result back: two thread wake-ups,
and the op's Python runs on a thread whose caches went cold while it slept. For a short op
(a 1×8 ``forward_backward`` on a tiny model takes ~8 ms) that hand-off was a few tenths of a
millisecond, a visible share. So the waiting caller runs the ops up to its own
(:meth:`Runner.run_here`) when all of these hold:

- the session is Running, no op is running and the next ones are queued without a gap;
- each op's kind ran in at most ``QUICK_S`` the last time (a long op stays on the worker,
  where the caller's Ctrl-C interrupts its wait at once);
- the engine says the calling thread's state is its worker's (``Engine.runs_in_caller``:
  for torch, no ``no_grad``, ``inference_mode``, autocast or device context the caller
  opened, and CUDA's device 0 and default stream current);
- a Ctrl-C cannot land half-way through: off the main thread none is delivered, and on it
  :class:`interrupts_held` holds the first one until the op has finished.

Otherwise the caller waits for the worker.

**Waking and idling.** Waking the worker at every submit costs too: it needs the GIL to see
that the caller already runs the op, and takes it from the caller mid-op (~0.1 ms a 1×8 op on
tiny). So once ``CALLERS_IN_A_ROW`` ops in a row ran on their callers, a submit to a Running
session leaves the worker asleep (:meth:`Runner.submitted`), and the worker instead:

- is woken by anyone who starts to wait on a training op (:meth:`Runner.wake_worker`): a
  caller whose op may not run here, a ``result(timeout=...)``, an ``await``, a long poll;
- looks every ``LOOKOUT_S`` for an op no one came for (submitted and left, to overlap other
  work), runs it, and from then on is woken by every submit again, as it is once the
  session has been idle for ``IDLE_S``.

While it waits it holds no OpenMP threads (cpu_threads.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from localsession import cpu_threads, vocab
from localsession.port import Engine, EngineConfigError, EngineSpec
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.run_op import Session as OpSession
from localsession.runtime.sessions.run_op import execute
from localsession.runtime.sessions.training_queue import TrainingQueue
from localsession.vocab import SessionStatus

#: An op kind that last ran in at most this many seconds may run on the waiting caller.
QUICK_S = 0.1
#: After this many training ops in a row ran on their callers, submits stop waking the worker.
CALLERS_IN_A_ROW = 2
#: How often a worker that submits no longer wake looks for an op no one came for...
LOOKOUT_S = 0.1
#: ...until the session has been idle this long: submits wake it again from then on.
IDLE_S = 1.0

logger = logging.getLogger(__name__)


class Session(OpSession, Protocol):
    """What the runner reads and updates of its session (``lifecycle.Session``); every
    field is guarded by ``lock``, whose condition is ``cond``."""

    cond: threading.Condition
    status: SessionStatus
    queue: TrainingQueue
    ops: dict[str, Operation]
    running_op: Operation | None
    engine: Engine | None
    last_activity: float

    def set_status(self, status: SessionStatus, error: str | None = None) -> None: ...


class Runner:
    """The worker and the caller-runs rules of one session (see the module doc)."""

    def __init__(self, session: Session, engine_factory: Callable[[EngineSpec], Engine]) -> None:
        self.session = session
        self._engine_factory = engine_factory
        #: op kind -> whether it last ran within QUICK_S
        self._quick: dict[str, bool] = {}
        #: Training ops in a row that ran on their callers (from CALLERS_IN_A_ROW on, a
        #: submit leaves the worker asleep).
        self._caller_streak = 0
        self.worker = threading.Thread(
            target=self._work, name=f"localsession-{session.name}", daemon=True
        )

    def start(self) -> None:
        self.worker.start()

    def join(self, timeout: float) -> None:
        """Wait for the worker to finish its current op and release the engine."""
        if self.worker.ident is not None:  # a restored session never started one
            self.worker.join(timeout)

    # -- waking ----------------------------------------------------------------------------

    def submitted(self) -> None:
        """A training op was queued (under ``lock``): wake the worker, unless callers run
        their ops and so most likely this one."""
        if self._caller_streak < CALLERS_IN_A_ROW or self.session.status != SessionStatus.RUNNING:
            self.session.cond.notify_all()

    def wake_worker(self) -> None:
        """For one about to wait on a training op: wake the worker if submits left it asleep,
        as this waiter does not run the op itself."""
        with self.session.lock:
            if self._caller_streak >= CALLERS_IN_A_ROW:
                self.session.cond.notify_all()

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        session = self.session
        engine = self._load_engine()
        if engine is None:
            return
        while (op := self._next_op()) is not None:
            self.run_one(engine, op)
        with session.lock:  # a caller may still be running an op (run_here)
            session.cond.wait_for(lambda: session.running_op is None)
        engine.close()

    def _load_engine(self) -> Engine | None:
        """Make the session's engine: Created -> Running, or Failed with the reason (None)."""
        session = self.session
        try:
            engine = self._engine_factory(session.spec)
        except EngineConfigError as exc:  # a setting to fix: its message says it all
            logger.error("session %s: the model failed to load: %s", session.name, exc)
            with session.lock:
                session.set_status(SessionStatus.FAILED, f"The base model failed to load: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001 - reported through the session status
            logger.exception("session %s: the model failed to load", session.name)
            with session.lock:
                session.set_status(SessionStatus.FAILED, f"The base model failed to load: {exc}")
            return None
        with session.lock:
            session.engine = engine
            if session.status == SessionStatus.CREATED:
                session.set_status(SessionStatus.RUNNING)
        return engine

    def _next_op(self) -> Operation | None:
        """Wait for the op holding the next sequence number and mark it running; None once
        the session ends."""
        session = self.session
        with session.lock:
            while session.status in (SessionStatus.RUNNING, SessionStatus.BLOCKED):
                if session.running_op is not None:  # a caller runs one (run_here)
                    self._idle_wait()
                    continue
                step = session.queue.advance(time.monotonic())
                if isinstance(step, Operation):
                    if session.status == SessionStatus.BLOCKED:
                        session.set_status(SessionStatus.RUNNING)
                    session.running_op = step
                    self._caller_streak = 0  # no caller came for it: submits wake the worker
                    step.start()
                    return step
                if step is None:  # nothing queued
                    self._idle_wait()
                    continue
                if session.status != SessionStatus.BLOCKED:
                    session.set_status(
                        SessionStatus.BLOCKED,
                        f"Waiting for sequence number {step.missing}; later operations are "
                        f"queued behind it (gap timeout {session.queue.gap_timeout:.0f}s).",
                    )
                session.cond.wait(step.remaining)
            return None

    def _idle_wait(self) -> None:
        """The worker's wait while it has no op to run (under ``lock``). While submits leave
        it asleep it looks again every LOOKOUT_S, until the session has been idle IDLE_S."""
        session = self.session
        cpu_threads.release()
        if self._caller_streak < CALLERS_IN_A_ROW:
            session.cond.wait()
        elif not session.cond.wait(LOOKOUT_S) and time.monotonic() - session.last_activity > IDLE_S:
            self._caller_streak = 0  # idle: sleep until a submit wakes it, not looking

    # -- a caller ----------------------------------------------------------------------------

    def run_here(self, operation_id: str) -> bool:
        """Run the queued training ops up to ``operation_id`` on the calling thread, if
        they may run there; else return at once and leave them to the worker. True if
        ``operation_id`` has finished."""
        engine = self.session.engine
        runs_in_caller = getattr(engine, "runs_in_caller", None)
        if engine is None or runs_in_caller is None or not runs_in_caller():
            return False  # the worker runs it
        with interrupts_held() as held:
            while held and (op := self._take_quick(operation_id)) is not None:
                self.run_one(engine, op)
        mine = self.session.ops.get(operation_id)
        return mine is not None and mine.status in vocab.OP_TERMINAL

    def _take_quick(self, operation_id: str) -> Operation | None:
        """The next op, marked running, while ``operation_id`` has not run, nothing runs,
        and the next op is queued and of a quick kind; else None."""
        session = self.session
        with session.lock:
            mine = session.ops.get(operation_id)
            if mine is None or mine.status != vocab.OpStatus.PENDING or mine.seq is None:
                return None
            if session.status != SessionStatus.RUNNING or session.running_op is not None:
                return None
            step = session.queue.peek()
            if step is None or not self._quick.get(step.kind, False):
                return None
            session.queue.advance(time.monotonic())
            session.running_op = step
            self._caller_streak += 1
            if self._caller_streak == CALLERS_IN_A_ROW:  # from now on the worker looks
                session.cond.notify_all()  # (LOOKOUT_S) rather than sleeping until woken
            step.start()
            return step

    # -- either ------------------------------------------------------------------------------

    def run_one(self, engine: Engine, op: Operation) -> None:
        """Run ``op`` (marked running), then free the session for the next one."""
        session = self.session
        started = time.monotonic()
        try:
            execute(session, engine, op)
        finally:
            if op.status not in vocab.OP_TERMINAL:  # interrupted (a second Ctrl-C in run_here)
                op.finish(
                    vocab.OpStatus.FAILED,
                    error="The operation was interrupted (a second Ctrl-C) while it ran; part "
                    "of it may have taken effect, such as part of a forward_backward's gradient.",
                )
            with session.lock:
                session.running_op = None
                session.last_activity = time.monotonic()
                self._quick[op.kind] = session.last_activity - started <= QUICK_S
                # the worker waits while an op runs: wake it only if it has work (an op
                # queued) or must end; a caller's op otherwise woke it for nothing
                if len(session.queue) or session.status not in (
                    SessionStatus.RUNNING,
                    SessionStatus.BLOCKED,
                ):
                    session.cond.notify_all()


# -- Ctrl-C ----------------------------------------------------------------------------------

#: The main thread's ident (the only thread signals reach), read once: the forking thread
#: becomes a child's main thread.
_main_thread = [threading.main_thread().ident]
os.register_at_fork(after_in_child=lambda: _main_thread.__setitem__(0, threading.get_ident()))


class interrupts_held:  # lower case, as contextlib.suppress: used like a function
    """``with interrupts_held() as held``: ``held`` says whether a Ctrl-C cannot interrupt
    the block. On the main thread with Python's default SIGINT handler, the first Ctrl-C is
    held and raised as ``KeyboardInterrupt`` once the block ends (a second one raises at
    once, as usual); other threads get no signals, nor does a process that ignores SIGINT
    (``cmd &`` in a shell script, where the shell starts background commands so). With any
    other handler installed, held is False and nothing changes. (A class rather than a
    generator: it is entered on every op.)
    """

    def __enter__(self) -> bool:
        self._caught: list[int] | None = None
        if threading.get_ident() != _main_thread[0]:
            return True
        handler = signal.getsignal(signal.SIGINT)
        if handler is signal.SIG_IGN:
            return True  # no Ctrl-C can interrupt the block
        if handler is not signal.default_int_handler:
            return False  # another handler is installed: it is left alone
        caught = self._caught = []

        def hold(signum: int, frame: FrameType | None) -> None:
            caught.append(signum)
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the next one raises

        signal.signal(signal.SIGINT, hold)
        return True

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self._caught is None:
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self._caught and kind is None:  # a block that raised keeps its own exception
            raise KeyboardInterrupt
