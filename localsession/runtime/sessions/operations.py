"""Operation records: one per accepted training or sampling op, with its status and result.

An operation moves Pending → InProgress → Completed | Failed | Skipped exactly once; waiters
block on its latch. A training op holds the typed command it runs (``port_commands``); its
``result`` is typed (``port_results``); its ``response()`` is the body of
``Get*OperationResult``, written by the SageMaker wire's serialiser (``sagemaker_wire``).
Beside them, :class:`TokenUsage`: a session's token counts, typed, said in the wire's
names only by ``sagemaker_wire``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localsession import vocab
from localsession.ids import uuid4_text
from localsession.port_commands import TrainingCommand
from localsession.port_results import OpResult
from localsession.runtime import sagemaker_wire


class Latch:
    """Set once; ``wait`` blocks until then. A ``threading.Event`` without its Python-level
    ``Condition``: one C lock, held from creation until ``set`` (made and set on every op)."""

    __slots__ = ("_closed",)

    def __init__(self) -> None:
        self._closed = threading.Lock()  # held while the latch is closed
        self._closed.acquire()

    def set(self) -> None:
        """Open the latch (call it once: the op's status guards that)."""
        self._closed.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the latch opened within ``timeout`` seconds (None: wait for it)."""
        if not self._closed.acquire(timeout=-1 if timeout is None else timeout):
            return False  # still closed
        self._closed.release()  # for the next waiter
        return True


@dataclass
class TokenUsage:
    """A session's token counts (guarded by its lock); the wire's names: :meth:`wire`."""

    prefill: int = 0
    sampled: int = 0
    training: int = 0

    def wire(self) -> dict[str, int]:
        """As ``BillableTokenUsage`` (and the session's on-disk record) says them."""
        return sagemaker_wire.usage_body(self.prefill, self.sampled, self.training)

    def restore(self, wire: dict[str, Any]) -> None:
        """Take the counts of a :meth:`wire` body (a session record's)."""
        self.prefill, self.sampled, self.training = sagemaker_wire.usage_counts(wire)


@dataclass
class Operation:
    """One accepted op of ``kind``: a training op runs its typed ``command``; a sampling op
    (``command`` None) carries its request in the scheduler's job."""

    kind: str
    command: TrainingCommand | None = None
    seq: int | None = None
    client_token: str = ""
    id: str = field(default_factory=uuid4_text)
    status: str = vocab.OpStatus.PENDING
    result: OpResult | None = None
    error: str | None = None
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    finished_at: float | None = None
    done: Latch = field(default_factory=Latch, repr=False)
    _callbacks: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _callbacks_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _wire: dict[str, Any] | None = field(default=None, repr=False)
    #: Called with the op after it starts and after it finishes (``Session.track``: the
    #: runtime's event log, runtime/events.py); None: nobody watches.
    observer: Callable[[Operation], None] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.status = vocab.OpStatus.IN_PROGRESS
        self.started_at = time.monotonic()
        if self.observer is not None:
            self.observer(self)

    def finish(
        self,
        status: str,
        *,
        result: OpResult | None = None,
        error: str | None = None,
    ) -> None:
        """Move to a terminal status once; later calls are ignored."""
        with self._callbacks_lock:  # one finish only, even from two threads: the latch opens once
            if self.status in vocab.OP_TERMINAL:
                return
            self.result = result
            self.error = error
            self.finished_at = time.monotonic()
            self.status = status
            callbacks, self._callbacks = self._callbacks, []
        try:
            if self.observer is not None:  # before the latch: a waiter sees the event logged
                self.observer(self)
        finally:
            self.done.set()  # whatever the observer did, no waiter hangs
        for callback in callbacks:
            callback()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the op is terminal: now if it is, else from the thread
        that finishes it (so it must be quick and thread-safe)."""
        with self._callbacks_lock:  # finish() sets the status under this lock
            if self.status not in vocab.OP_TERMINAL:
                self._callbacks.append(callback)
                return
        callback()

    def response(self) -> dict[str, Any]:
        """The ``Get*OperationResult`` body for this op's current state."""
        status = self.status  # read once: the result is set before the status moves
        return sagemaker_wire.operation_body(
            status, self.kind, self.wire_result(), self.error, self.result
        )

    def wire_result(self) -> dict[str, Any] | None:
        """A completed op's result in the SageMaker wire's shape (made once), else None."""
        if self.status != vocab.OpStatus.COMPLETED or self.result is None:
            return None
        if self._wire is None:
            self._wire = sagemaker_wire.result_body(self.result)
        return self._wire

    def same_request(self, command: TrainingCommand) -> bool:
        """Whether ``command`` asks for what this op's did (a retry of it)."""
        return self.command == command
