"""``APIFuture``: the handle every training and sampling op returns.

The public behaviour is the SDK's: ``result(timeout)`` (blocking), ``await`` and
``result_async(timeout)``, ``exception()``, ``done()``, and ``cancel()`` (always False: an
accepted op cannot be recalled). A result or an op failure is remembered, so asking twice
neither asks the service twice nor runs ``parse_fn`` twice.

``APIFuture`` itself resolves by *polling*: ``poll_fn()`` returns a ``Get*OperationResult``
body; while its status is ``Pending`` or ``InProgress`` the future sleeps ``poll_interval``
and asks again; ``Completed`` is parsed, ``Failed`` or ``Skipped`` raise ``OperationError``.
A poll that fails transiently (``is_retryable``) is retried after a jittered, doubling delay
(0.5 s up to 4 s), at most 150 times in a row. The deadline is checked between polls only, as
the SDK does, so a wait overruns its timeout by at most one interval plus one poll. Clock,
sleeps and jitter are constructor arguments so that tests can script all of it.

Two internal variants that resolve in stages live with the clients that make them
(``localsession.client._staged``): one waits for a background submit, one for the chunks of a
large batch. The in-process clients subclass ``APIFuture`` to wait on the runtime's
completion event instead of polling (``localsession.client._submit``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from enum import Enum
from typing import Any, Awaitable, Callable, Dict, Generator, Generic, Optional, TypeVar

from localsession.exceptions import OperationError, TrainingSessionError, is_retryable
from localsession.vocab import OpStatus

__all__ = ("APIFuture", "RequestStatus")

_T = TypeVar("_T")

#: Seconds between two polls of an op that is still running.
DEFAULT_POLL_INTERVAL: int = 2
#: ``result()`` waits without limit unless given a timeout.
DEFAULT_TIMEOUT: Optional[float] = None
#: Transient failures in a row that a submit or a poll survives (about five minutes of backoff).
DEFAULT_MAX_TRANSIENT_POLL_ERRORS: int = 150
#: Backoff after the n-th transient failure: uniform in [0, min(MAX, BASE * 2**(n-1))].
DEFAULT_BACKOFF_BASE_SECONDS: float = 0.5
DEFAULT_BACKOFF_MAX_SECONDS: float = 4.0

_NOTHING: Any = object()  # "not resolved yet" (``None`` is a legitimate result)


def _jittered(
    failures: int,
    rand_fn: Callable[[float, float], float],
    base: float = DEFAULT_BACKOFF_BASE_SECONDS,
    cap: float = DEFAULT_BACKOFF_MAX_SECONDS,
) -> float:
    """Delay after ``failures`` transient failures in a row (1 for the first)."""
    return rand_fn(0.0, min(cap, base * 2 ** (failures - 1)))


def call_with_transient_retry(
    fn: Callable[[], Any],
    *,
    max_attempts: int = DEFAULT_MAX_TRANSIENT_POLL_ERRORS,
    backoff_base: float = DEFAULT_BACKOFF_BASE_SECONDS,
    backoff_max: float = DEFAULT_BACKOFF_MAX_SECONDS,
    sleep_fn: Callable[[float], None] = time.sleep,
    rand_fn: Callable[[float, float], float] = random.uniform,
) -> Any:
    """``fn()``, tried up to ``max_attempts`` times while it fails transiently."""
    for attempt in range(1, max(1, max_attempts) + 1):
        try:
            return fn()
        except Exception as failure:
            if attempt >= max_attempts or not is_retryable(failure):
                raise
        sleep_fn(_jittered(attempt, rand_fn, backoff_base, backoff_max))
    raise AssertionError("unreachable")  # pragma: no cover - max_attempts < 1


class RequestStatus(str, Enum):
    """Where an op is: ``Pending`` → ``InProgress`` → ``Completed``, ``Failed`` or ``Skipped``
    (abandoned because its session failed)."""

    PENDING = OpStatus.PENDING.value
    IN_PROGRESS = OpStatus.IN_PROGRESS.value
    COMPLETED = OpStatus.COMPLETED.value
    FAILED = OpStatus.FAILED.value
    SKIPPED = OpStatus.SKIPPED.value


_FAILED_STATES = (OpStatus.FAILED, OpStatus.SKIPPED)
#: Each status by its wire value (a dict lookup, not an enum construction, on every read).
_STATES: Dict[Any, str] = {status.value: status.value for status in RequestStatus}


def _limit_text(timeout: Optional[float]) -> str:
    return "no limit" if timeout is None else format(timeout, ".1f") + "s"


class _Deadline:
    """One deadline across the stages of a wait (``None``: no limit)."""

    def __init__(self, timeout: Optional[float], clock: Callable[[], float]) -> None:
        self.clock = clock
        self.at = None if timeout is None else clock() + timeout

    def left(self) -> Optional[float]:
        return None if self.at is None else max(0.0, self.at - self.clock())

    def open(self) -> bool:
        return self.at is None or self.clock() < self.at


class _Outcome:
    """The remembered answer of a future: a value or a ``TrainingSessionError``, set once."""

    def __init__(self) -> None:
        self.value: Any = _NOTHING
        self.error: Any = _NOTHING
        self.lock = threading.Lock()

    def known(self) -> bool:
        return self.value is not _NOTHING or self.error is not _NOTHING

    def replay(self) -> Any:
        if self.error is not _NOTHING:
            raise self.error
        return self.value

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is _NOTHING:
                self.error = error

    def settle(self, make: Callable[[], Any]) -> Any:
        """Store ``make()`` unless something is stored already; return what is stored."""
        with self.lock:
            if self.value is _NOTHING and self.error is _NOTHING:
                self.value = make()
            return self.replay()


class APIFuture(Generic[_T]):
    """The pending result of one op; ``result()`` blocks, ``await`` suspends.

    ``poll_fn`` returns the op's current ``Get*OperationResult`` body; ``parse_fn`` turns a
    completed one into the result. ``status_key`` names the status field, ``operation_type``
    labels messages. ``time_fn``, ``sleep_fn``, ``async_sleep_fn`` and ``rand_fn`` replace the
    clock, the sleeps and the jitter draw (for tests); ``max_transient_poll_errors`` bounds
    transient poll failures in a row.
    """

    def __init__(
        self,
        operation_id: str,
        poll_fn: Callable[[], Dict[str, Any]],
        parse_fn: Callable[[Dict[str, Any]], _T],
        *,
        status_key: str = "status",
        operation_type: str = "operation",
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        time_fn: Callable[[], float] = time.monotonic,
        sleep_fn: Callable[[float], None] = time.sleep,
        async_sleep_fn: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_transient_poll_errors: int = DEFAULT_MAX_TRANSIENT_POLL_ERRORS,
        rand_fn: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._operation_id = operation_id
        self._poll_fn, self._parse_fn = poll_fn, parse_fn
        self._status_key, self._operation_type = status_key, operation_type
        self._poll_interval = poll_interval
        self._time_fn, self._sleep_fn, self._async_sleep_fn = time_fn, sleep_fn, async_sleep_fn
        self._max_transient_poll_errors = max_transient_poll_errors
        self._rand_fn = rand_fn
        self._outcome = _Outcome()

    @property
    def operation_id(self) -> str:
        """The service's id for this op."""
        op_id: str = self._operation_id
        return op_id

    # -- one poll answer ---------------------------------------------------------------------

    def _absorb(self, body: Dict[str, Any]) -> bool:
        """Take one poll answer; True once the outcome is stored (raising if it is an error).

        Only one thread runs ``parse_fn``; an error it raises, or a failed op, is remembered
        like a result. A failed *poll* is not: it says nothing about the op.
        """
        try:
            # a status newer than this client: keep waiting
            state = _STATES.get(body.get(self._status_key), OpStatus.IN_PROGRESS)
        except TypeError:  # not even a string
            state = OpStatus.IN_PROGRESS
        with self._outcome.lock:
            if state in (OpStatus.COMPLETED, *_FAILED_STATES) and not self._outcome.known():
                try:
                    if state != OpStatus.COMPLETED:
                        note = body.get("errorDetails", f"Operation ended with status: {state}")
                        kind, op_id = self._operation_type, self._operation_id
                        raise OperationError(kind, note, operation_id=op_id)
                    self._outcome.value = self._parse_fn(body)
                except TrainingSessionError as failure:
                    self._outcome.error = failure
            settled = self._outcome.known()
        if settled:
            self._outcome.replay()
        return settled

    def _out_of_time(self, timeout: Optional[float]) -> TimeoutError:
        what = f"{self._operation_type} operation {self._operation_id}"
        return TimeoutError(f"{what} did not complete within {_limit_text(timeout)}")

    # -- waiting -----------------------------------------------------------------------------

    def result(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> _T:
        """Wait for the op and return its result.

        Raises ``OperationError`` if it failed, ``TimeoutError`` if ``timeout`` seconds pass
        first, and a poll's own error if it is not transient or recurs too often.
        """
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline, failures = _Deadline(timeout, self._time_fn), 0
        while deadline.open():
            try:
                body = self._poll_fn()
            except Exception as failure:
                failures += 1
                if failures > self._max_transient_poll_errors or not is_retryable(failure):
                    raise
                self._sleep_fn(_jittered(failures, self._rand_fn))
                continue
            failures = 0
            if self._absorb(body):
                return self._outcome.value  # type: ignore[no-any-return]
            self._sleep_fn(self._poll_interval)  # still running: the next poll after a pause
        raise self._out_of_time(timeout)

    async def result_async(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> _T:
        """``result()`` for coroutines: only each poll takes a worker thread, never the wait."""
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        deadline, failures = _Deadline(timeout, self._time_fn), 0
        while deadline.open():
            try:
                body = await asyncio.to_thread(self._poll_fn)
            except Exception as failure:
                failures += 1
                if failures > self._max_transient_poll_errors or not is_retryable(failure):
                    raise
                await self._async_sleep_fn(_jittered(failures, self._rand_fn))
                continue
            failures = 0
            if self._absorb(body):
                return self._outcome.value  # type: ignore[no-any-return]
            await self._async_sleep_fn(self._poll_interval)  # as in result()
        raise self._out_of_time(timeout)

    def __await__(self) -> Generator[Any, None, _T]:
        waiting = self.result_async()
        return waiting.__await__()

    def done(self) -> bool:
        """Whether a wait has learnt the outcome (a result or a failure of the op).

        As in the SDK: an op that finished but that nobody waited on is not done yet, and a
        failed *request* (a poll that raised) is no outcome, so it leaves this False.
        """
        return self._outcome.known()

    def exception(self, timeout: Optional[float] = DEFAULT_TIMEOUT) -> Optional[BaseException]:
        """Wait like ``result()``; return the error the op failed with, or ``None``.

        ``TimeoutError`` is raised, not returned: running out of time is not the op's error.
        """
        try:
            self.result(timeout)
        except Exception as failure:  # noqa: BLE001 - handed to the caller
            if isinstance(failure, TimeoutError):
                raise
            return failure
        return None

    def cancel(self) -> bool:
        """An accepted op cannot be called back: always ``False`` (stop the session instead)."""
        recalled = False
        return recalled

    def cancelled(self) -> bool:
        """Always ``False``, see ``cancel()``."""
        return self.cancel()
