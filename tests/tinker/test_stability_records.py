"""The stability records behind ``stable_reinforce`` (server/tinker/stability.py): Tinker's
one-day life restarted by each use, refusal of unknown, expired and other sessions' ids by
name, and a failed sampling request named as such. A settable clock stands in for a day."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localsession import vocab
from localsession.port_results import OpOutcome, SampledSequence, SampleResult
from localsession.runtime.errors import ServiceError
from localsession.server.tinker.stability import RECORD_TTL_S, StabilityRecords

DAY = RECORD_TTL_S


class FakeOp:
    """A runtime sampling op as the records see it: the outcome their callback is given."""

    def __init__(self, done: Callable[[OpOutcome], None]) -> None:
        self.done = done

    def finish(self, result: SampleResult | None, error: str | None = None) -> None:
        status = vocab.OpStatus.COMPLETED if result else vocab.OpStatus.FAILED
        self.done(OpOutcome(status, result, error))


def sampled(*tokens: int) -> SampledSequence:
    return SampledSequence(list(tokens), [-0.5 * t for t in tokens], "stop")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def recorded(clock: Clock) -> StabilityRecords:
    records = StabilityRecords(clock)
    op = FakeOp(records.record(["r-0", "r-1"], "session-a", [7, 8, 9]))
    op.finish(SampleResult([sampled(1, 2), sampled(3)]))
    return records


def test_a_recorded_sequence_is_returned_with_its_prompt_tokens_and_logprobs() -> None:
    records = recorded(Clock())
    got = records.take(["r-1", "r-0"], "session-a")
    assert got["r-0"].prompt == [7, 8, 9]
    assert got["r-0"].tokens == [1, 2] and got["r-0"].logprobs == [-0.5, -1.0]
    assert got["r-1"].tokens == [3]


def test_a_day_after_sampling_the_id_is_refused_as_expired() -> None:
    clock = Clock()
    records = recorded(clock)
    clock.now += DAY - 1
    records.take(["r-0"], "session-a")  # one second short of a day: fine, and restarted
    clock.now += DAY - 1
    records.take(["r-0"], "session-a")  # a day since sampling, but not since its last use
    clock.now += DAY
    with pytest.raises(ServiceError, match="'r-0' has expired") as raised:
        records.take(["r-0"], "session-a")
    assert raised.value.http_status == 400
    with pytest.raises(ServiceError, match="'r-1' has expired"):  # never used: expired too
        records.take(["r-1"], "session-a")


def test_unknown_and_other_sessions_ids_are_refused_by_name() -> None:
    records = recorded(Clock())
    with pytest.raises(ServiceError, match="'nope' is unknown.*record_stability_info=True"):
        records.take(["r-0", "nope"], "session-a")
    with pytest.raises(ServiceError, match="'r-0' was sampled in session session-a"):
        records.take(["r-0"], "session-b")


def test_a_refused_request_restarts_no_day() -> None:
    clock = Clock()
    records = recorded(clock)
    clock.now += DAY - 10
    with pytest.raises(ServiceError):
        records.take(["r-0", "nope"], "session-a")
    clock.now += 20
    with pytest.raises(ServiceError, match="expired"):
        records.take(["r-0"], "session-a")


def test_a_failed_sampling_request_is_named() -> None:
    records = StabilityRecords(Clock())
    op = FakeOp(records.record(["f-0"], None, [1]))
    op.finish(None, "the prompt is longer than the context")
    with pytest.raises(ServiceError, match="failed \\(the prompt is longer than the context\\)"):
        records.take(["f-0"], "any-session")


def test_an_ended_session_forgets_its_records() -> None:
    records = recorded(Clock())
    assert len(records) == 2
    records.drop_session("session-a")
    assert len(records) == 0
    with pytest.raises(ServiceError, match="unknown"):
        records.take(["r-0"], "session-a")
