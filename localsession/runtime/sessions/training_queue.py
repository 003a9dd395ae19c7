"""A session's ordered training queue: ops held by sequence number and released in order.

Sequence numbers start at 1 and grow by one per training op (docs/semantics.md#4). An op is
released only once every lower number has been released or recorded lost. A missing number
holds the ops behind it until it arrives or the gap timeout passes; then it is recorded lost
(with a warning) and the later ops run. Re-sending an accepted op (same number, client token
and request) returns the original; any other reuse of a number, or a number already passed,
is refused, as is a number more than ``MAX_AHEAD`` past the next expected one. Once
``max_queued`` ops wait, further submits are throttled, except for the number the worker
waits for.

The queue has no lock and no thread. Its owner (``runtime/sessions/lifecycle.py``) calls it under
the session's condition and does the waiting: ``advance`` returns the op to run, a ``Gap`` to wait
on, or None when nothing is queued.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from localsession import vocab
from localsession.port_commands import TrainingCommand
from localsession.runtime import errors
from localsession.runtime.sessions.operations import Operation

logger = logging.getLogger(__name__)
#: How far past the next expected number a submit may be (more is refused, not queued).
MAX_AHEAD = 10_000


@dataclass(frozen=True)
class Gap:
    """Later ops are queued but number ``missing`` has not arrived: wait up to ``remaining``
    seconds (or until something is submitted) and ask again."""

    missing: int
    remaining: float


class TrainingQueue:
    """The sequence bookkeeping of one session (``session`` names it in messages)."""

    def __init__(self, session: str, *, gap_timeout: float, max_queued: int | None = None) -> None:
        self.session = session
        #: Seconds a missing number may hold later ops before it is recorded lost.
        self.gap_timeout = gap_timeout
        #: Ops that may wait before submits are throttled (None: any number).
        self.max_queued = max_queued
        #: The number the next released op must hold.
        self.next_seq = 1
        #: The highest number accepted or consumed (``LastReceivedSequenceNumber``).
        self.last_received = 0
        self._by_seq: dict[int, Operation] = {}
        self._waiting: dict[int, Operation] = {}
        self._lost: set[int] = set()
        self._gap_since: float | None = None

    def __len__(self) -> int:
        """Ops accepted and not yet released."""
        return len(self._waiting)

    def admit(self, seq: int, token: str, command: TrainingCommand) -> Operation:
        """The op under ``seq``: a new one, queued; or the original for an identical retry."""
        seen = self._by_seq.get(seq)
        if seen is not None:
            if token and seen.client_token == token and seen.same_request(command):
                return seen
            raise errors.validation(
                f"sequenceNumber {seq} was already used by another operation in session "
                f"{self.session}; the next free number is {self.last_received + 1}"
            )
        if seq < self.next_seq or seq in self._lost:
            raise errors.validation(
                f"sequenceNumber {seq} is behind this session's queue (next expected: "
                f"{self.next_seq}); numbers increase by 1 per training op"
            )
        if self._far_ahead(seq):
            raise errors.validation(
                f"sequenceNumber {seq} is {seq - self.next_seq} past this session's next "
                f"expected number, {self.next_seq}; numbers increase by 1 per training op "
                f"(at most {MAX_AHEAD} ahead)"
            )
        # The number the worker waits for is always let in, so a full queue of later
        # numbers cannot wait forever on a throttled one.
        full = self.max_queued is not None and len(self._waiting) >= self.max_queued
        if full and seq != self.next_seq:
            raise errors.throttling(
                f"Training session {self.session} already has {len(self._waiting)} training "
                f"operations queued (the limit is {self.max_queued}); retry once earlier "
                "ones finish, or raise the limit (--max-queued-ops)."
            )
        op = Operation(kind=command.kind, command=command, seq=seq, client_token=token)
        self._by_seq[seq] = op
        self._waiting[seq] = op
        self.last_received = max(self.last_received, seq)
        return op

    def _far_ahead(self, seq: int) -> bool:
        """Whether ``seq`` is more than :data:`MAX_AHEAD` past the next expected number: the
        gap's numbers would be walked and recorded one by one (one request with
        ``seq_id`` 10**40 ran a server out of memory)."""
        return seq > self.next_seq + MAX_AHEAD

    def missing_before(self, seq: int) -> bool:
        """Whether a number below ``seq`` has neither arrived nor been recorded lost, so op
        ``seq`` cannot run until another submit (or the gap timeout) comes."""
        return any(n not in self._by_seq and n not in self._lost for n in range(self.next_seq, seq))

    def unfinished_before(self, seq: int) -> bool:
        """Whether a number below ``seq`` is still to be released: queued here, or not yet
        arrived and not recorded lost (the op the session runs now is not counted)."""
        return any(
            n in self._waiting or (n not in self._by_seq and n not in self._lost)
            for n in range(self.next_seq, seq)
        )

    def consume(self, seq: int) -> bool:
        """Record a number whose submit was refused as used, so nothing waits on it (the
        server's lenient mode). A number already taken is left alone; False then."""
        if seq < self.next_seq or seq in self._by_seq or self._far_ahead(seq):
            return False
        self._lost.add(seq)
        self.last_received = max(self.last_received, seq)
        return True

    def peek(self) -> Operation | None:
        """The op ``advance`` would release now; None for a gap or an empty queue."""
        seq = self.next_seq
        while seq in self._lost:
            seq += 1
        return self._waiting.get(seq)

    def advance(self, now: float) -> Operation | Gap | None:
        """Release the op holding the next number; else the ``Gap`` to wait on (recording
        the missing numbers lost once it has lasted ``gap_timeout`` since ``now`` first saw
        it), or None when nothing is queued."""
        while True:
            if self.next_seq in self._lost:
                self.next_seq += 1
                continue
            op = self._waiting.pop(self.next_seq, None)
            if op is not None:
                self.next_seq += 1
                self._gap_since = None
                return op
            if not self._waiting:
                return None
            # A gap: later numbers are queued while next_seq is missing.
            if self._gap_since is None:
                self._gap_since = now
            waited = now - self._gap_since
            if waited < self.gap_timeout:
                return Gap(self.next_seq, self.gap_timeout - waited)
            first = min(self._waiting)
            self._lost.update(range(self.next_seq, first))
            self._warn_lost(first - 1)
            self.next_seq = first

    def skip_all(self, reason: str) -> None:
        """End every queued op Skipped with ``reason`` (the session stopped or expired)."""
        for op in self._waiting.values():
            op.finish(vocab.OpStatus.SKIPPED, error=reason)
        self._waiting.clear()

    def _warn_lost(self, last: int) -> None:
        missing = (
            f"operation number {self.next_seq}"
            if last == self.next_seq
            else f"operation numbers {self.next_seq}-{last}"
        )
        logger.warning(
            "session %s: %s never arrived, most likely a request refused (for "
            "example by validation) after the SDK had numbered it. Later operations "
            "waited %.0fs for it and now run in order; nothing is wrong with them. "
            "(`localsession serve --lenient-sequence` stops a refused request from "
            "holding up the ones after it.)",
            self.session,
            missing,
            self.gap_timeout,
        )
