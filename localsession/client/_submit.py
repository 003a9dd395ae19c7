"""Runtime ops in-process: the submit, and futures that finish on the runtime's event.

``submit`` checks a request as botocore would (strict mode), copies it as JSON would (so
the caller mutating its lists later cannot change a queued op, as on the wire; both in one
pass, client/param_check_fast.py) and hands it to the client's ``BackgroundSubmitter``. The
caller gets the op's ``RuntimeFuture`` at once when the runtime accepted it in the caller's
thread (the usual case), else a ``PendingAPIFuture`` that waits for the submit; a refused
submit surfaces at ``result()``, as with the SDK.

``RuntimeFuture`` does not poll. ``result()`` blocks on the runtime's completion event for
its op (``await``: on an asyncio future that the runtime's completion callback sets). A
``result()`` without a timeout on a training op first offers to run it on the caller's thread
(``run_here``: the runtime decides). Only then is the op's result read, once, with the SDK's
transient-error budget. ``done()`` is the SDK's: True only once a wait has learnt the outcome
(a result or a failed op), never merely because the op finished, and never because a request
for it failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from localsession import vocab
from localsession.client._handle import BackgroundSubmitter
from localsession.client._staged import PendingAPIFuture
from localsession.client.backend import Backend, call, checked_copy
from localsession.client.param_check_fast import wire_copy
from localsession.futures import APIFuture, call_with_transient_retry

_Value = TypeVar("_Value")

_TRAINING = "ExecuteTrainingOperation"
_READS = {
    _TRAINING: "GetTrainingOperationResult",
    "ExecuteSamplingOperation": "GetSamplingOperationResult",
}


def _label(operation: str) -> str:
    return "training" if operation == _TRAINING else vocab.OpKind.SAMPLE.value


class RuntimeFuture(APIFuture[_Value]):
    """An op's future that the runtime completes: no polling loop; ``done()`` as in the SDK.
    ``keepalive`` (the client's session handle) keeps the session from being auto-stopped
    while this future is held."""

    def __init__(
        self,
        backend: Backend,
        session_name: str,
        operation: str,
        operation_id: str,
        parse_fn: Callable[[dict[str, Any]], _Value],
        keepalive: Any = None,
    ) -> None:
        training, local, read_name = operation == _TRAINING, backend.in_process, _READS[operation]
        read = (
            backend.get_training_operation_result
            if training
            else (backend.get_sampling_operation_result)
        )
        APIFuture.__init__(
            self,
            operation_id,
            lambda: call(read_name, lambda: read(session_name, operation_id)),
            parse_fn,
            operation_type=_label(operation),
            sleep_fn=local.backoff,
        )
        self._keepalive = keepalive
        self._local, self._session_name, self._training = local, session_name, training
        self._read_name = read_name

    def _wait(self, timeout: float | None) -> bool:
        """Whether the op is terminal within ``timeout`` (an unknown session or op raises as
        the read of its result would)."""
        name, op_id, local = self._session_name, self._operation_id, self._local
        return bool(call(self._read_name, lambda: local.wait_operation(name, op_id, timeout)))

    def _read_final(self) -> _Value:
        body = call_with_transient_retry(
            self._poll_fn,
            max_attempts=self._max_transient_poll_errors + 1,
            sleep_fn=self._sleep_fn,
        )
        if not self._absorb(body):  # pragma: no cover - read only once the op is terminal
            raise RuntimeError(f"operation {self._operation_id} reported done while {body}")
        return self._outcome.value  # type: ignore[no-any-return]

    def result(self, timeout: float | None = None) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        # no time limit to honour: the op may run on this thread (runtime/sessions/runner.py)
        here = timeout is None and self._training
        finished = here and self._local.run_here(self._session_name, self._operation_id)
        if not finished and not self._wait(timeout):
            raise self._out_of_time(timeout)
        return self._read_final()

    async def result_async(self, timeout: float | None = None) -> _Value:
        if self._outcome.known():
            return self._outcome.replay()  # type: ignore[no-any-return]
        loop = asyncio.get_running_loop()  # the runtime's thread wakes this loop
        woken: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(_resolve, woken)
            except RuntimeError:  # the loop has closed: nobody waits any more
                pass

        self._local.on_operation_done(self._session_name, self._operation_id, wake)
        try:
            await asyncio.wait_for(woken, timeout)
        except asyncio.TimeoutError:  # the op is still running
            raise self._out_of_time(timeout) from None
        return await asyncio.to_thread(self._read_final)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def operation_future(
    backend: Backend,
    session_name: str,
    operation: str,
    operation_id: str,
    parse_fn: Callable[[dict[str, Any]], _Value],
) -> APIFuture[_Value]:
    """The future of an op that the runtime already accepted."""
    return RuntimeFuture(backend, session_name, operation, operation_id, parse_fn)


def submit(
    submitter: BackgroundSubmitter,
    backend: Backend,
    session_name: str,
    operation: str,
    params: dict[str, Any],
    parse_fn: Callable[[dict[str, Any]], _Value],
    *,
    strict: bool,
    keepalive: Any,
) -> APIFuture[_Value]:
    """Queue one runtime op on ``submitter``; returns its future at once."""
    execute = (
        backend.execute_training_operation
        if operation == _TRAINING
        else (backend.execute_sampling_operation)
    )
    checked: Exception | None = None
    try:
        if strict:  # checked and copied in one pass
            request = checked_copy(operation, {"trainingSessionName": session_name, **params})
            del request["trainingSessionName"]  # the backend call names the session itself
        else:
            request = wire_copy(params)
    except Exception as refusal:  # noqa: BLE001 - surfaces at result(), like a wire submit
        checked = refusal

    def attempt() -> RuntimeFuture[_Value]:
        if checked is not None:
            raise checked
        accepted = call(operation, lambda: execute(session_name, request))
        op_id = accepted["operationId"]
        return RuntimeFuture(backend, session_name, operation, op_id, parse_fn, keepalive)

    sent = submitter.send(attempt, backend.in_process.backoff)
    if isinstance(sent, RuntimeFuture):  # accepted at once: nothing left to wait for but the op
        return sent
    return PendingAPIFuture(sent, operation_type=_label(operation), keepalive=keepalive)
