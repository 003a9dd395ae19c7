"""``TrainingQueue`` on its own: release order, retries and reuse, gaps, throttling, skipping.

The queue has no thread and no clock of its own, so each test drives ``advance(now)`` with
chosen times and checks what comes out against the sequence rules (docs/semantics.md#4).
The same rules through a running session are in ``test_queue.py``.
"""

from __future__ import annotations

import logging

import pytest

from localsession.port import AdamHyperparams
from localsession.port_commands import OptimCommand, SaveCommand
from localsession.runtime.errors import ServiceError
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.training_queue import MAX_AHEAD, Gap, TrainingQueue


def step(seq: int) -> OptimCommand:
    """A command that differs per number (its learning rate), as ops' bodies do."""
    return OptimCommand(AdamHyperparams(learning_rate=seq * 1e-4))


def admit(queue: TrainingQueue, seq: int, token: str = "") -> Operation:
    return queue.admit(seq, token, step(seq))


def released(queue: TrainingQueue, now: float = 0.0) -> list[int | None]:
    """The sequence numbers ``advance`` releases at ``now`` until it stops releasing."""
    out: list[int | None] = []
    while isinstance(step := queue.advance(now), Operation):
        out.append(step.seq)
    return out


def test_ops_are_released_in_sequence_order_whatever_the_arrival_order() -> None:
    queue = TrainingQueue("s", gap_timeout=5.0)
    for seq in (3, 1, 2):
        admit(queue, seq)
    assert len(queue) == 3
    assert released(queue) == [1, 2, 3]
    assert len(queue) == 0 and queue.next_seq == 4 and queue.last_received == 3
    assert queue.advance(0.0) is None  # nothing queued: no gap either


def test_a_missing_number_is_a_gap_that_closes_when_it_arrives() -> None:
    queue = TrainingQueue("s", gap_timeout=5.0)
    admit(queue, 2)
    assert queue.advance(10.0) == Gap(missing=1, remaining=5.0)
    assert queue.advance(12.5) == Gap(missing=1, remaining=2.5)  # measured from first sight
    admit(queue, 1)
    assert released(queue, 13.0) == [1, 2]
    admit(queue, 4)  # a new gap starts its own clock
    assert queue.advance(100.0) == Gap(missing=3, remaining=5.0)


def test_after_the_gap_timeout_the_missing_numbers_are_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = TrainingQueue("gappy", gap_timeout=5.0)
    admit(queue, 3)
    assert queue.advance(0.0) == Gap(missing=1, remaining=5.0)
    with caplog.at_level(logging.WARNING, logger="localsession.runtime.sessions.training_queue"):
        assert released(queue, 5.0) == [3]
    (record,) = caplog.records
    assert "session gappy: operation numbers 1-2 never arrived" in record.getMessage()
    for late in (1, 2):  # a lost number cannot be used afterwards
        with pytest.raises(ServiceError, match=f"sequenceNumber {late} is behind") as refused:
            admit(queue, late)
        assert refused.value.code == "ValidationException"
    admit(queue, 4)
    assert released(queue, 5.0) == [4]


def test_one_lost_number_is_named_alone(caplog: pytest.LogCaptureFixture) -> None:
    queue = TrainingQueue("s", gap_timeout=0.0)
    admit(queue, 2)
    with caplog.at_level(logging.WARNING, logger="localsession.runtime.sessions.training_queue"):
        assert released(queue) == [2]
    assert "operation number 1 never arrived" in caplog.text


def test_an_identical_retry_gets_the_original_and_other_reuse_is_refused() -> None:
    queue = TrainingQueue("s", gap_timeout=5.0)
    first = admit(queue, 1, token="t1")
    assert admit(queue, 1, token="t1") is first
    assert len(queue) == 1
    with pytest.raises(ServiceError, match="already used") as other_token:
        admit(queue, 1, token="t2")
    with pytest.raises(ServiceError, match="already used"):
        queue.admit(1, "t1", step(99))  # same token, other command
    with pytest.raises(ServiceError, match="already used"):
        admit(queue, 1)  # no token: never a retry
    assert other_token.value.code == "ValidationException"
    assert "the next free number is 2" in other_token.value.message
    assert released(queue) == [1]
    assert admit(queue, 1, token="t1") is first  # still a retry after it ran
    with pytest.raises(ServiceError, match="already used"):
        admit(queue, 1, token="t3")  # ... but never a second op under its number


def test_consumed_numbers_hold_nothing_up() -> None:
    queue = TrainingQueue("s", gap_timeout=1e9)
    assert queue.consume(1) and queue.consume(2)
    assert queue.last_received == 2
    admit(queue, 3)
    assert released(queue) == [3]
    assert not queue.consume(3)  # taken: left alone
    assert not queue.consume(1)  # already passed
    with pytest.raises(ServiceError, match="behind"):
        admit(queue, 2)


def test_a_full_queue_throttles_all_but_the_awaited_number() -> None:
    queue = TrainingQueue("full", gap_timeout=5.0, max_queued=2)
    admit(queue, 2)
    admit(queue, 3)
    with pytest.raises(ServiceError, match="already has 2 training operations") as refused:
        admit(queue, 4)
    assert refused.value.code == "ThrottlingException"
    assert "(the limit is 2)" in refused.value.message
    admit(queue, 1)  # the number the worker waits for always gets in
    assert released(queue) == [1, 2, 3]
    admit(queue, 4)  # room again
    assert len(queue) == 1


def test_skip_all_ends_every_queued_op_skipped() -> None:
    queue = TrainingQueue("s", gap_timeout=5.0)
    ran = admit(queue, 1)
    assert released(queue) == [1]
    waiting = [admit(queue, 3), admit(queue, 4)]
    queue.skip_all("The session was stopped before this operation ran.")
    assert [op.status for op in waiting] == ["Skipped", "Skipped"]
    assert {op.error for op in waiting} == {"The session was stopped before this operation ran."}
    assert ran.status == "Pending"  # released ops are the worker's, not the queue's
    assert len(queue) == 0 and queue.advance(0.0) is None


def test_missing_before_names_an_op_that_waits_on_an_unsent_number() -> None:
    """What the server asks before holding a submit's answer (docs/wire.md#6)."""
    queue = TrainingQueue("s", gap_timeout=5.0)
    admit(queue, 1)
    assert not queue.missing_before(1)
    admit(queue, 3)
    assert queue.missing_before(3)  # 2 has not arrived
    admit(queue, 2)
    assert not queue.missing_before(3) and not queue.missing_before(2)
    assert released(queue) == [1, 2, 3]
    admit(queue, 6)
    assert queue.missing_before(6)  # 4 and 5 missing
    assert queue.consume(4) and queue.consume(5)  # lenient mode records them used
    assert not queue.missing_before(6)


def test_peek_names_the_op_advance_releases_without_releasing_it() -> None:
    queue = TrainingQueue("s", gap_timeout=5.0)
    assert queue.peek() is None  # empty
    three = admit(queue, 3)
    assert queue.peek() is None  # numbers 1 and 2 are missing: a gap
    assert queue.consume(1) and queue.consume(2)  # refused submits: used, not awaited
    assert queue.peek() is three and len(queue) == 1  # past the lost numbers, still queued
    assert queue.advance(0.0) is three and queue.peek() is None


def test_unfinished_before_counts_queued_and_missing_numbers_not_lost_ones() -> None:
    queue = TrainingQueue("s", gap_timeout=0.0)
    assert not queue.unfinished_before(1)
    queue.admit(1, "t1", SaveCommand(checkpoint=True))
    assert queue.unfinished_before(2)  # 1 is queued
    assert isinstance(queue.advance(0.0), Operation)  # 1 released (runs)
    assert not queue.unfinished_before(2)
    assert queue.unfinished_before(4)  # 2 and 3 have not arrived
    queue.consume(2)
    queue.consume(3)
    assert not queue.unfinished_before(4)  # recorded lost: nothing to wait for


def test_a_number_far_past_the_next_one_is_refused_and_consumes_nothing() -> None:
    """A number more than MAX_AHEAD past the next expected one is refused by name: queued,
    its gap's numbers would be walked and recorded one by one (one request with seq_id
    10**40 ran a server out of memory). Refused, it holds nothing back."""
    queue = TrainingQueue("s", gap_timeout=5.0)
    admit(queue, 1)
    assert released(queue) == [1]
    admit(queue, 2 + MAX_AHEAD)  # the farthest let in
    for far in (3 + MAX_AHEAD, 10**40):
        with pytest.raises(ServiceError, match=f"sequenceNumber {far} is {far - 2} past"):
            admit(queue, far)
        assert queue.consume(far) is False  # a refused far number is not recorded either
    admit(queue, 2)
    assert released(queue) == [2]
    assert queue.last_received == 2 + MAX_AHEAD and len(queue) == 1
