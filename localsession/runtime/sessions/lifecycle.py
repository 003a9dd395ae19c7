"""One training session: its status machine, its training queue and its describe.

Training ops run one at a time, strictly in sequence-number order (docs/semantics.md#4);
``running_op`` says which op runs, wherever it runs. The session's ``TrainingQueue``
(runtime/sessions/training_queue.py) decides which op is next; who runs it, on the session's
worker thread (which first loads the engine) or on a caller waiting for it, is
runtime/sessions/runner.py's (``session.runner``), and what an op does is
runtime/sessions/run_op.py's. A failed op changes no state and later ops still run.
Stopping skips what is still queued; completed results stay readable until the session is
deleted. Which packages a session may load is runtime/sessions/package_fit.py's; what its
on-disk record holds, and how one is restored, is runtime/sessions/persist.py's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from localsession import vocab
from localsession.port import Engine, EngineSpec, ResolvedModel
from localsession.port_commands import TrainingCommand
from localsession.runtime import errors
from localsession.runtime.events import EventLog, Phase, op_summary
from localsession.runtime.faults import Faults
from localsession.runtime.packages.registry import Registry
from localsession.runtime.sessions.operations import Operation, TokenUsage
from localsession.runtime.sessions.runner import Runner
from localsession.runtime.sessions.training_queue import TrainingQueue
from localsession.vocab import SessionStatus


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Session:
    """A session and its worker. All mutable state is guarded by ``self.lock``."""

    def __init__(
        self,
        name: str,
        arn: str,
        spec: EngineSpec,
        details: dict[str, Any],
        *,
        strict: bool,
        gap_timeout: float,
        engine_factory: Callable[[EngineSpec], Engine],
        registry: Callable[[], Registry],
        faults: Faults | None = None,
        max_queued: int | None = None,
        on_change: Callable[[Session], None] | None = None,
        start: bool = True,
        resolve_model: Callable[[str], ResolvedModel] | None = None,
        events: EventLog | None = None,
    ) -> None:
        self.name, self.arn, self.spec, self.details = name, arn, spec, details
        #: Where its ops' submits, starts and finishes are logged (runtime/events.py).
        self.events = events
        #: Training ops in sequence order (max_queued: how many may wait before throttling).
        self.queue = TrainingQueue(name, gap_timeout=gap_timeout, max_queued=max_queued)
        #: Called (under ``lock``) after every status change: the service persists the record.
        self._on_change = on_change
        self.strict = strict
        self.status: SessionStatus = SessionStatus.CREATED
        self.error_details: str | None = None
        self.creation_time = self.last_modified_time = _now()
        self.end_time: datetime | None = None
        self.last_activity = time.monotonic()
        #: The tokens its ops prefilled, sampled and trained on (billed, as the service does).
        self.usage = TokenUsage()
        self.engine: Engine | None = None
        self.ops: dict[str, Operation] = {}
        #: Held for any state change (a C-level RLock: entering ``cond`` itself costs two
        #: Python calls, on every op); ``cond`` is its condition, to wait and notify on.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.running_op: Operation | None = None
        #: The service's catalog lookup, to tell whether a package's base model is this one
        #: (package_fit.py).
        self.resolve_model = resolve_model
        self.registry = registry
        self.faults = faults
        #: The package ``loadWeightsForSampling`` pointed this session's samplers at.
        self.sampling_package: str | None = None
        #: Who runs the ops: the worker (which makes the engine with ``engine_factory``), or
        #: a caller waiting on one (runtime/sessions/runner.py).
        self.runner = Runner(self, engine_factory)
        if start:
            self.runner.start()

    # -- status --------------------------------------------------------------------------

    def set_status(self, status: SessionStatus, error: str | None = None) -> None:
        self.status = status
        if error is not None or status in (SessionStatus.RUNNING,):
            self.error_details = error
        self.last_modified_time = _now()
        if status in (SessionStatus.STOPPED, SessionStatus.FAILED, SessionStatus.EXPIRED):
            self.end_time = self.last_modified_time
        self.cond.notify_all()
        if self._on_change is not None:
            self._on_change(self)

    def wait_until_started(self, timeout: float | None = None) -> str:
        """Block until the engine is loaded (Running) or loading failed; return the status."""
        with self.lock:
            self.cond.wait_for(lambda: self.status != SessionStatus.CREATED, timeout)
            return self.status

    def describe(self) -> dict[str, Any]:
        with self.lock:
            detail: dict[str, Any] = {
                "TrainingSessionArn": self.arn,
                "TrainingSessionName": self.name,
                "TrainingSessionStatus": self.status,
                "CreationTime": self.creation_time,
                "LastModifiedTime": self.last_modified_time,
                "LastReceivedSequenceNumber": self.queue.last_received,
                "BillableTokenUsage": self.usage.wire(),
                **self.details,
            }
            if self.end_time is not None:
                detail["EndTime"] = self.end_time
            if self.error_details:
                detail["ErrorDetails"] = self.error_details
            return detail

    def stop(self) -> None:
        """Running/Blocked/Created → Stopping → Stopped; queued training ops are Skipped."""
        with self.lock:
            if self.status in vocab.SESSION_NOT_STOPPABLE:
                raise errors.validation(
                    f"Training session {self.name} cannot be stopped: invalid session state "
                    f"transition from {self.status} to Stopping"
                )
            self.set_status(SessionStatus.STOPPING)
            self.queue.skip_all("The session was stopped before this operation ran.")
            self.set_status(SessionStatus.STOPPED)

    def expire(self) -> None:
        with self.lock:
            if self.status in (SessionStatus.RUNNING, SessionStatus.BLOCKED):
                self.queue.skip_all("The session expired after inactivity.")
                self.set_status(
                    SessionStatus.EXPIRED, "The session was idle longer than its idle timeout."
                )

    def require_accepting(self) -> None:
        """Runtime calls are accepted only while Running or Blocked (409 otherwise)."""
        if self.status not in (SessionStatus.RUNNING, SessionStatus.BLOCKED):
            raise errors.conflict(
                f"Training session {self.name} is {self.status}; runtime operations need a "
                "Running session. Create a new session (or wait for this one to start)."
            )

    # -- training queue (runtime/sessions/training_queue.py) ---------------------------------------

    def submit_training(self, seq: int, token: str, command: TrainingCommand) -> str:
        """Queue a checked command under its sequence number; return its operation id
        (idempotent)."""
        with self.lock:
            self.require_accepting()
            self.last_activity = time.monotonic()
            op = self.queue.admit(seq, token, command)
            if op.id not in self.ops:  # not a retry of one already logged
                self.track(op)
            self.ops[op.id] = op
            self.runner.submitted()
            return op.id

    def track(self, op: Operation) -> None:
        """Log ``op``'s submit now, and its start and finish when they come (the event log's
        observer on the op); nothing without an event log."""
        log, name = self.events, self.name
        if log is None:
            return

        def observe(seen: Operation) -> None:
            if seen.status == vocab.OpStatus.IN_PROGRESS:
                log.op(name, Phase.STARTED, seen.id, seen.kind, seen.seq)
                return
            metrics, tokens = op_summary(seen.result)
            log.op(
                name,
                Phase.FINISHED,
                seen.id,
                seen.kind,
                seen.seq,
                status=seen.status,
                error=seen.error or "",
                metrics=metrics,
                tokens=tokens,
            )

        op.observer = observe
        log.op(name, Phase.SUBMITTED, op.id, op.kind, op.seq)

    def waits_for_earlier(self, operation_id: str) -> bool:
        """Whether this training op cannot run before a lower sequence number arrives (a gap
        before it); False for sampling ops and unknown ids."""
        with self.lock:
            op = self.ops.get(operation_id)
            return op is not None and op.seq is not None and self.queue.missing_before(op.seq)

    def runs_behind_another(self, operation_id: str) -> bool:
        """Whether this training op waits for an earlier one: one that runs now, is queued,
        or has not arrived. False for sampling ops, unknown ids and the op that runs."""
        with self.lock:
            op = self.ops.get(operation_id)
            if op is None or op.seq is None or op is self.running_op:
                return False
            if op.status in vocab.OP_TERMINAL:
                return False
            running = self.running_op is not None and self.running_op.seq is not None
            return running or self.queue.unfinished_before(op.seq)

    def consume(self, seq: int) -> None:
        """Record a number whose submit was refused as used, so nothing waits on it (the
        server's lenient mode, docs/semantics.md#4). A number already taken is left alone."""
        with self.lock:
            if self.queue.consume(seq):
                self.cond.notify_all()

    def add_sample_usage(self, prefill: int, decode: int) -> None:
        with self.lock:
            self.usage.prefill += prefill
            self.usage.sampled += decode
            self.last_activity = time.monotonic()
