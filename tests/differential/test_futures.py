"""Trace equivalence of ``APIFuture`` (the polling path users meet over the wire).

Both implementations are driven with the same scripted poll answers (statuses, transient and
fatal errors, terminal payloads) and the same injected clock, sleep and random functions. The
polls made, the sleeps requested, ``done()`` at every poll, the final value or exception, and
what a second ``result()`` replays must all be equal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._sdk import our_exceptions, our_futures, outcome, sdk_exceptions, sdk_futures

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

steps = st.one_of(
    st.tuples(st.just("status"), st.sampled_from(["Pending", "InProgress", "Weird", None])),
    st.tuples(st.just("done"), st.sampled_from(["Completed", "Failed", "Skipped"])),
    st.tuples(st.just("transient"), st.sampled_from(["ThrottlingException", "Internal500"])),
    st.tuples(st.just("fatal"), st.just("ValidationException")),
)


def _client_error(kind: str) -> ClientError:
    if kind == "Internal500":
        unavailable: dict[str, Any] = {"ResponseMetadata": {"HTTPStatusCode": 503}}
        return ClientError(unavailable, "GetTrainingOperationResult")  # type: ignore[arg-type]
    status = 400 if kind == "ValidationException" else 429
    return ClientError(
        {"Error": {"Code": kind, "Message": kind}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetTrainingOperationResult",
    )


class Harness:
    """One implementation's future, with a scripted service and a fake clock."""

    def __init__(self, futures: Any, exceptions: Any, script: list[Any], options: dict[str, Any]):
        self.now = 0.0
        self.trace: list[Any] = []
        self.script = list(script)
        self.exceptions = exceptions
        self.future = futures.APIFuture(
            "op-1",
            self.poll,
            self.parse,
            operation_type="training",
            poll_interval=options["interval"],
            time_fn=lambda: self.now,
            sleep_fn=self.sleep,
            async_sleep_fn=self.async_sleep,
            max_transient_poll_errors=options["budget"],
            rand_fn=self.rand,
        )
        self.mismatch = options["mismatch"]

    def poll(self) -> dict[str, Any]:
        self.trace.append(("poll", self.now, self.future.done()))
        self.now += 0.25  # a poll takes time too
        kind, detail = self.script.pop(0) if self.script else ("status", "InProgress")
        if kind in ("transient", "fatal"):
            raise _client_error(detail)
        body: dict[str, Any] = {"status": detail}
        if detail == "Completed":
            body["operationResult"] = {"forwardBackward": {"metrics": {"loss": 1.0}}}
        if detail == "Failed":
            body["errorDetails"] = "boom"
        return body

    def parse(self, body: dict[str, Any]) -> Any:
        self.trace.append(("parse",))
        if self.mismatch:
            raise self.exceptions.ResultMismatchError("computeLogprobs", 3, 2)
        return body["operationResult"]

    def sleep(self, seconds: float) -> None:
        self.trace.append(("sleep", round(seconds, 9)))
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def rand(self, low: float, high: float) -> float:
        self.trace.append(("rand", low, high))
        return low + (high - low) * 0.375


def _summary(result: tuple[str, Any]) -> Any:
    kind, got = result
    if kind == "ok":
        return kind, got
    return kind, type(got).__name__, str(got)


def _drive(harness: Harness, timeout: Any, use_async: bool) -> Any:
    if use_async:
        first = outcome(lambda: asyncio.run(harness.future.result_async(timeout)))
    else:
        first = outcome(lambda: harness.future.result(timeout))
    done_after = harness.future.done()
    polls_before = len(harness.trace)
    again = outcome(lambda: harness.future.result(0))
    replay_polls = len(harness.trace) - polls_before
    exc = outcome(lambda: harness.future.exception(0))
    return (
        harness.trace,
        _summary(first),
        done_after,
        _summary(again),
        replay_polls if first[0] == "ok" or done_after else None,
        _summary(exc) if exc[0] == "raised" else (exc[0], type(exc[1]).__name__),
        harness.future.cancel(),
        harness.future.cancelled(),
        harness.future.operation_id,
    )


@SETTINGS
@given(
    script=st.lists(steps, max_size=12),
    timeout=st.one_of(st.none(), st.floats(0, 30)),
    interval=st.sampled_from([0.05, 2.0]),
    budget=st.integers(0, 4),
    mismatch=st.booleans(),
    use_async=st.booleans(),
)
def test_poll_traces_are_equal(
    script: list[Any], timeout: Any, interval: float, budget: int, mismatch: bool, use_async: bool
) -> None:
    if timeout is None:  # an unbounded wait must end: finish the script with a terminal answer
        script = [*script, ("done", "Completed")]
    options = {"interval": interval, "budget": budget, "mismatch": mismatch}
    mine = Harness(our_futures, our_exceptions, script, options)
    theirs = Harness(sdk_futures, sdk_exceptions, script, options)
    assert _drive(mine, timeout, use_async) == _drive(theirs, timeout, use_async)


@SETTINGS
@given(
    failures=st.integers(0, 6),
    retryable=st.booleans(),
    attempts=st.integers(0, 5),
)
def test_transient_retry_is_equal(failures: int, retryable: bool, attempts: int) -> None:
    def run(futures: Any) -> Any:
        trace: list[Any] = []
        left = [failures]

        def fn() -> str:
            trace.append("call")
            if left[0]:
                left[0] -= 1
                raise _client_error("ThrottlingException" if retryable else "ValidationException")
            return "sent"

        got = outcome(
            lambda: futures.call_with_transient_retry(
                fn,
                max_attempts=attempts,
                sleep_fn=lambda s: trace.append(("sleep", s)),
                rand_fn=lambda lo, hi: (trace.append(("rand", lo, hi)), hi / 2)[1],
            )
        )
        return trace, _summary(got)

    assert run(our_futures) == run(sdk_futures)


def test_request_status_values() -> None:
    assert [s.value for s in our_futures.RequestStatus] == [
        s.value for s in sdk_futures.RequestStatus
    ]
