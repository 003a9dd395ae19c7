"""The runtime's op events: when each op was submitted, started and finished, and which
sampling batch it rode in, kept per session in a small bounded, thread-safe log.

The runtime records them (``Session.track`` hooks an op, runtime/sessions/scheduler.py
records each sampling batch); the console in ``serve`` (server/console/) and the Chrome-trace
exporter (runtime/trace.py) read them. No dialect writes or shapes them: an event names the
runtime session, the op's kind and its sequence number, with wall-clock times (seconds since
the epoch, ``time.time()``), so a trace lines up with the server's log.

Bounded three ways: each session keeps its last ``per_session`` events, the log keeps the
``max_sessions`` sessions active most recently, and all of them together at most
``max_events`` events (past it, the oldest events of the session active least recently go
first). Measured: 10,000 forward_backward ops (30,000 events, each finish with 10 metrics)
hold 7.5 MB, ~250 bytes an event, so the default bounds hold ~50 MB at the very most. Every event
gets a number (``cursor``) that grows by one, so a poller asks for what came after the last
number it saw.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from localsession.port_results import ForwardResult, OptimResult, SampleResult

#: Events each session keeps (its oldest are dropped first).
PER_SESSION = 20_000
#: Sessions the log keeps events for (the session seen least recently is dropped first).
MAX_SESSIONS = 256
#: Events the log keeps in all (the least recently active session's oldest go first).
MAX_EVENTS = 200_000


class Phase(str, Enum):
    """What happened to an op (``BATCH`` is a whole sampling batch, not one op)."""

    SUBMITTED = "submitted"
    STARTED = "started"
    FINISHED = "finished"
    BATCH = "batch"


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~3x (every op)
class OpEvent:
    """One thing that happened to an op of ``session`` at ``t`` (epoch seconds).

    ``seq`` is a training op's sequence number (None for sampling ops). On ``FINISHED``:
    ``status`` (the op's terminal status), ``error`` (the first line of a failure),
    ``metrics`` (what the op returned: loss, grad_norm, learning_rate, ...) and ``tokens``
    (tokens trained on, or sampled). A ``BATCH`` event spans ``t`` to ``end``, ran the ops
    ``ops`` (ids) over ``tokens`` sampled tokens, and numbers itself ``batch``.
    """

    cursor: int
    t: float
    session: str
    phase: Phase
    op_id: str = ""
    kind: str = ""
    seq: int | None = None
    status: str = ""
    error: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    tokens: int = 0
    batch: int | None = None
    end: float | None = None
    ops: tuple[str, ...] = ()


class EventLog:
    """Per-session bounded event lists behind one lock (see the module doc)."""

    def __init__(
        self,
        *,
        per_session: int = PER_SESSION,
        max_sessions: int = MAX_SESSIONS,
        max_events: int = MAX_EVENTS,
    ) -> None:
        if min(per_session, max_sessions, max_events) < 1:
            raise ValueError("an EventLog keeps at least one event of one session")
        self.per_session, self.max_sessions = per_session, max_sessions
        self.max_events = max_events
        self._count = 0  # events held, in all sessions
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, deque[OpEvent]] = OrderedDict()
        self._cursor = 0
        self._batches = 0

    @property
    def cursor(self) -> int:
        """The number of the newest event (0 before any)."""
        with self._lock:
            return self._cursor

    def op(
        self,
        session: str,
        phase: Phase,
        op_id: str,
        kind: str,
        seq: int | None,
        *,
        status: str = "",
        error: str = "",
        metrics: Mapping[str, float] | None = None,
        tokens: int = 0,
    ) -> None:
        """Record that op ``op_id`` of ``session`` was submitted, started or finished now
        (``metrics`` is kept as given: the caller hands over a dict it no longer changes)."""
        now = time.time()
        with self._lock:
            self._cursor += 1
            self._append(
                OpEvent(
                    self._cursor,
                    now,
                    session,
                    phase,
                    op_id,
                    kind,
                    seq,
                    status,
                    error.splitlines()[0][:300] if error else "",
                    metrics if metrics is not None else {},
                    tokens,
                )
            )

    def batch(self, session: str, kind: str, start: float, ops: list[str], tokens: int) -> int:
        """Record a sampling batch of ``session`` that ran ``ops`` from ``start`` until now
        (epoch seconds), sampling ``tokens``; its batch number."""
        now = time.time()
        with self._lock:
            self._cursor += 1
            self._batches += 1
            event = OpEvent(
                self._cursor,
                start,
                session,
                Phase.BATCH,
                kind=kind,
                tokens=tokens,
                batch=self._batches,
                end=now,
                ops=tuple(ops),
            )
            self._append(event)
            return self._batches

    def _append(self, event: OpEvent) -> None:
        events = self._by_session.get(event.session)
        if events is None:
            events = self._by_session[event.session] = deque(maxlen=self.per_session)
            while len(self._by_session) > self.max_sessions:
                self._count -= len(self._by_session.popitem(last=False)[1])
        else:
            self._by_session.move_to_end(event.session)
        if len(events) == self.per_session:
            self._count -= 1  # the deque drops its oldest
        events.append(event)
        self._count += 1
        while self._count > self.max_events:  # the least recently active session's oldest
            oldest = next(iter(self._by_session))
            dropped = self._by_session[oldest]
            dropped.popleft()
            self._count -= 1
            if not dropped:
                del self._by_session[oldest]

    def events(self, session: str | None = None, since: int = 0) -> list[OpEvent]:
        """The events numbered above ``since``, oldest first: of one session, or of all."""
        with self._lock:
            if session is not None:
                chosen = list(self._by_session.get(session, ()))
            else:
                chosen = [e for events in self._by_session.values() for e in events]
        found = [e for e in chosen if e.cursor > since]
        if session is None:
            found.sort(key=lambda e: e.cursor)
        return found

    def sessions(self) -> list[str]:
        """The sessions with events, least recently active first."""
        with self._lock:
            return list(self._by_session)


def op_summary(result: object) -> tuple[dict[str, float], int]:
    """What a finished op's typed result tells a chart: its numeric metrics, and the tokens
    it trained on (``forward``/``forward_backward``) or sampled (``sample``)."""
    if isinstance(result, ForwardResult):
        return _numbers(result.metrics), result.token_count
    if isinstance(result, OptimResult):
        return _numbers(result.metrics), 0
    if isinstance(result, SampleResult):
        return {}, sum(len(s.tokens) for s in result.sequences)
    return {}, 0


def _numbers(metrics: Mapping[str, object]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
