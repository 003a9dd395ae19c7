"""Stability records for ``stable_reinforce``: what a ``record_stability_info=True`` sampler
keeps of every sequence it samples, keyed by the ``sequence_id`` the client gets.

Tinker's rules (its StableReinforce page): every sample of such a sampler is recorded; a
recorded sequence belongs to the session that sampled it and can be trained on for one day
after sampling; each training request that uses it restarts that day. Here a record holds
the request's prompt and the sequence's tokens and per-token log-probabilities as the
sampler computed them (the "stability info" localsession's objective reads). Records live in
the server's memory, as the Tinker dialect's sessions, samplers and models do: a restarted
``serve`` has none of them, so it refuses the old ids by name like any unknown id. A record is
dropped when its session ends; an expired one leaves a tombstone for a week, so a late use is
told "expired", not "unknown".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from localsession import vocab
from localsession.port_results import OpOutcome, SampleResult
from localsession.runtime import errors

#: How long a recorded sequence may be trained on after sampling or its last use (Tinker: a day).
RECORD_TTL_S = 24 * 3600.0
#: How long an expired id is still named as expired rather than unknown.
TOMBSTONE_S = 7 * 24 * 3600.0
#: How long a training request waits for a sampling request still running to record.
PENDING_WAIT_S = 60.0


@dataclass(frozen=True)
class RecordedSequence:
    """One sampled sequence as recorded: its request's prompt, its tokens and logprobs."""

    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]


@dataclass
class _Request:
    """One recording sampling request: filled in when its op ends."""

    session_id: str | None
    prompt: list[int]
    ready: threading.Event = field(default_factory=threading.Event)
    sequences: list[RecordedSequence] | None = None
    error: str | None = None


@dataclass
class _Record:
    request: _Request
    index: int
    expires: float


class StabilityRecords:
    """Every recorded sequence by id (thread-safe). ``clock`` is wall time (a test sets it)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._expired: dict[str, float] = {}  # id -> when its tombstone goes
        self._swept = 0.0

    def record(
        self, ids: list[str], session_id: str | None, prompt: list[int]
    ) -> Callable[[OpOutcome], None]:
        """Record the sequences a sampling request will return under ``ids``, one per
        requested sample, for ``session_id``; call what this returns with the request's
        outcome once its op ends (``Service.control.when_done``)."""
        request = _Request(session_id, list(prompt))
        now = self.clock()
        with self._lock:
            self._sweep(now)
            for index, sequence_id in enumerate(ids):
                self._records[sequence_id] = _Record(request, index, now + RECORD_TTL_S)

        def finished(outcome: OpOutcome) -> None:
            result = outcome.result
            if outcome.status == vocab.OpStatus.COMPLETED and isinstance(result, SampleResult):
                request.sequences = [
                    RecordedSequence(request.prompt, list(s.tokens), [float(v) for v in s.logprobs])
                    for s in result.sequences
                ]
            else:
                request.error = outcome.error or f"it ended {outcome.status}"
            request.ready.set()

        return finished

    def take(self, ids: Iterable[str], session_id: str | None) -> dict[str, RecordedSequence]:
        """The recorded sequences a training request names, each one's day restarted; a
        400 naming the first id that is unknown, expired, another session's, or whose
        sampling failed (nothing is restarted then)."""
        wanted = sorted(set(ids))
        now = self.clock()
        found: dict[str, _Record] = {}
        with self._lock:
            self._sweep(now)
            for sequence_id in wanted:
                record = self._records.get(sequence_id)
                if record is not None and record.expires <= now:
                    self._bury(sequence_id, now)
                    record = None
                if record is None:
                    raise _refusal(sequence_id, expired=sequence_id in self._expired)
                owner = record.request.session_id
                if owner is not None and session_id is not None and owner != session_id:
                    raise errors.validation(
                        f"sequence_id {sequence_id!r} was sampled in session {owner}, not in "
                        f"this model's session {session_id}: a training request can only name "
                        "sequences sampled in its own session (sample and train in one session)"
                    )
                found[sequence_id] = record
        out: dict[str, RecordedSequence] = {}
        for sequence_id, record in found.items():
            request = record.request
            if not request.ready.wait(PENDING_WAIT_S):
                raise errors.validation(
                    f"sequence_id {sequence_id!r}: its sampling request has not finished "
                    f"after {PENDING_WAIT_S:.0f} s; train on it once its sample() returns"
                )
            if request.sequences is None or record.index >= len(request.sequences):
                raise errors.validation(
                    f"sequence_id {sequence_id!r} has no recorded sequence: the sampling "
                    f"request that returned it failed ({request.error or 'no result'})"
                )
            out[sequence_id] = request.sequences[record.index]
        with self._lock:  # every id checked: each use restarts its day
            for record in found.values():
                record.expires = now + RECORD_TTL_S
        return out

    def drop_session(self, session_id: str) -> None:
        """Forget the records of a session that ended."""
        with self._lock:
            gone = [k for k, r in self._records.items() if r.request.session_id == session_id]
            for sequence_id in gone:
                del self._records[sequence_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _bury(self, sequence_id: str, now: float) -> None:
        self._records.pop(sequence_id, None)
        self._expired[sequence_id] = now + TOMBSTONE_S

    def _sweep(self, now: float) -> None:
        """Move expired records to tombstones and drop old tombstones (at most once a
        minute; the caller holds the lock)."""
        if now - self._swept < 60.0:
            return
        self._swept = now
        for sequence_id in [k for k, r in self._records.items() if r.expires <= now]:
            self._bury(sequence_id, now)
        for sequence_id in [k for k, until in self._expired.items() if until <= now]:
            del self._expired[sequence_id]


def _refusal(sequence_id: str, *, expired: bool) -> errors.ServiceError:
    if expired:
        return errors.validation(
            f"sequence_id {sequence_id!r} has expired: a recorded sequence can be trained on "
            "for one day after it was sampled or last trained on; sample it again"
        )
    return errors.validation(
        f"sequence_id {sequence_id!r} is unknown: stable_reinforce trains only on sequences "
        "sampled in this server's lifetime by a sampling client created with "
        "record_stability_info=True"
    )
