"""The futures that resolve in stages, behind the SDK's ``APIFuture`` interface.

- ``PendingAPIFuture`` is what a training or sampling call returns while its submit still runs
  on the client's background submitter (``_submit``): it waits for the submit, then for the
  op's own future. A submit that was refused raises at ``result()``.
- ``CombinedFuture`` is what ``forward_backward`` returns for a batch split into chunks
  (``_inputs.chunk_datum_list``): it waits for each chunk's future in order and folds the
  results into one.

Both turn ``timeout`` into one deadline for the whole wait, and remember their outcome as
``APIFuture`` does (``localsession.futures``). Their ``done()`` reads only their own remembered
outcome, as the SDK's do: an inner future that finished or was waited on elsewhere does not
make the outer one done.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future as _ConcurrentFuture
from concurrent.futures import TimeoutError as _ConcurrentTimeout
from typing import Any, TypeVar

from localsession.exceptions import TrainingSessionError
from localsession.futures import DEFAULT_TIMEOUT, APIFuture, _Deadline, _limit_text, _Outcome

_Value = TypeVar("_Value")

# A wait that ran out (asyncio's is a distinct class before Python 3.11).
_TIMED_OUT = (TimeoutError, asyncio.TimeoutError)


class PendingAPIFuture(APIFuture[_Value]):
    """A future whose submit is still running in the background.

    ``submit_future`` (a ``concurrent.futures.Future``) yields the op's ``APIFuture``, or the
    error the submit met; that error surfaces here, at ``result()``. ``keepalive`` holds the
    client's session handle so the session is not auto-stopped while this is outstanding.
    """

    def __init__(
        self,
        submit_future: Any,
        *,
        operation_type: str = "operation",
        keepalive: Any = None,
        time_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self._submit_future: _ConcurrentFuture[APIFuture[_Value]] = submit_future
        self._operation_type, self._time_fn = operation_type, time_fn
        self._keepalive = keepalive
        self._outcome = _Outcome()

    def _unsent(self, timeout: float | None) -> TimeoutError:
        what = f"{self._operation_type} operation"
        return TimeoutError(f"{what} was not submitted within {_limit_text(timeout)}")

    def _inner(self, timeout: float | None = DEFAULT_TIMEOUT) -> APIFuture[_Value]:
        try:
            inner: APIFuture[_Value] = self._submit_future.result(timeout)
            return inner
        except _ConcurrentTimeout:
            raise self._unsent(timeout) from None

    @property
    def operation_id(self) -> str:
        """The op's id; waits for the submit if it is still running."""
        return self._inner().operation_id

    def _known_id(self) -> str:
        sent = self._submit_future
        if sent.done() and sent.exception() is None:
            return sent.result().operation_id
        unknown = "<not submitted>"
        return unknown

    def done(self) -> bool:
        """True once a wait on *this* future learnt the outcome (as the SDK's)."""
        return self._outcome.known()

    def _late(self, inner: APIFuture[_Value], timeout: float | None) -> TimeoutError:
        what = f"{self._operation_type} operation {inner.operation_id}"
        return TimeoutError(f"{what} did not complete within {_limit_text(timeout)}")

    def result(self, timeout: float | None = DEFAULT_TIMEOUT) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline = _Deadline(timeout, self._time_fn)
        inner = self._inner(deadline.left())
        try:
            value = inner.result(deadline.left())
        except _TIMED_OUT:
            raise self._late(inner, timeout) from None
        except TrainingSessionError as failure:
            self._outcome.fail(failure)
            raise
        return self._outcome.settle(lambda: value)  # type: ignore[no-any-return]

    async def result_async(self, timeout: float | None = DEFAULT_TIMEOUT) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline = _Deadline(timeout, self._time_fn)
        waiting = asyncio.shield(asyncio.wrap_future(self._submit_future))
        try:
            inner = await asyncio.wait_for(waiting, deadline.left())
        except _TIMED_OUT:
            raise self._unsent(timeout) from None
        try:
            value = await inner.result_async(deadline.left())
        except _TIMED_OUT:
            raise self._late(inner, timeout) from None
        except TrainingSessionError as failure:
            self._outcome.fail(failure)
            raise
        return self._outcome.settle(lambda: value)  # type: ignore[no-any-return]


class CombinedFuture(APIFuture[_Value]):
    """One future over the chunk futures of a split batch, folded by ``combine_fn``.

    Chunks are awaited in submission order, so the first failing chunk is the one reported.
    """

    def __init__(
        self,
        futures: list[APIFuture[_Value]],
        combine_fn: Callable[[list[_Value]], _Value],
        *,
        time_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        if len(futures) == 0:
            raise ValueError("CombinedFuture requires at least one sub-future")  # noqa: TRY003
        self._futures, self._combine_fn = futures, combine_fn
        self._time_fn = time_fn
        self._outcome = _Outcome()

    @property
    def operation_id(self) -> str:
        """The first chunk's op id."""
        first = self._futures[0]
        return first.operation_id

    def done(self) -> bool:
        """True once a wait on *this* future learnt the outcome (as the SDK's)."""
        return self._outcome.known()

    def _timed_out(self, timeout: float | None) -> TimeoutError:
        first = self._futures[0]
        known = first._known_id() if isinstance(first, PendingAPIFuture) else first.operation_id
        parts = len(self._futures)
        limit = _limit_text(timeout)
        return TimeoutError(  # the whole budget, not the slice the last chunk was given
            f"chunked operation {known} did not complete within {limit} ({parts} sub-operations)"
        )

    def result(self, timeout: float | None = DEFAULT_TIMEOUT) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline = _Deadline(timeout, self._time_fn)
        parts: list[_Value] = []
        try:
            for part in self._futures:
                parts.append(part.result(deadline.left()))
        except _TIMED_OUT:
            raise self._timed_out(timeout) from None
        except TrainingSessionError as failure:
            self._outcome.fail(failure)
            raise
        return self._outcome.settle(lambda: self._combine_fn(parts))  # type: ignore[no-any-return]

    async def result_async(self, timeout: float | None = DEFAULT_TIMEOUT) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline = _Deadline(timeout, self._time_fn)
        parts: list[_Value] = []
        try:
            for part in self._futures:
                parts.append(await part.result_async(deadline.left()))
        except _TIMED_OUT:
            raise self._timed_out(timeout) from None
        except TrainingSessionError as failure:
            self._outcome.fail(failure)
            raise
        return self._outcome.settle(lambda: self._combine_fn(parts))  # type: ignore[no-any-return]
