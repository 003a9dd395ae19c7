"""Turning a wire request into the SDK's futures, against a ``Backend``.

A submit runs in the caller's thread: botocore's client-side checks (strict mode), a JSON copy
of the request (so later mutation of the caller's lists cannot change a queued op, as on the
wire), then the backend call, retried as the SDK retries a submit (``ThrottlingException`` and
5xx refusals, with the same sequence number and client token, up to 150 attempts, the jittered
backoff slept by the backend's ``backoff``). Its outcome is stored in a
``concurrent.futures.Future`` and wrapped in the SDK's ``PendingAPIFuture``, so a refused
submit surfaces at ``result()``, not at the call site, exactly as with the SDK. Polling wakes
on completion instead of sleeping the SDK's 2 s interval.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable
from typing import Any, TypeVar

from localsession.client.backend import Backend, call, check_params
from localsession.futures import APIFuture, PendingAPIFuture, call_with_transient_retry

_T = TypeVar("_T")

#: Longest single wait between polls. A completion wakes the waiter at once; this only bounds
#: how late a ``result(timeout=...)`` notices its deadline.
POLL_INTERVAL = 0.05

_RESULT_OPS = {
    "ExecuteTrainingOperation": "GetTrainingOperationResult",
    "ExecuteSamplingOperation": "GetSamplingOperationResult",
}


def _wire_copy(value: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(value))
    return copied


def submit(
    backend: Backend,
    session_name: str,
    operation: str,
    params: dict[str, Any],
    parse_fn: Callable[[dict[str, Any]], _T],
    *,
    strict: bool,
    keepalive: Any,
) -> APIFuture[_T]:
    """Send one runtime op and return the future the SDK would return for it."""
    operation_type = "training" if operation == "ExecuteTrainingOperation" else "sample"
    submitted: concurrent.futures.Future[APIFuture[_T]] = concurrent.futures.Future()
    try:
        if strict:
            check_params(operation, {"trainingSessionName": session_name, **params})
        request = _wire_copy(params)
        execute = (
            backend.execute_training_operation
            if operation == "ExecuteTrainingOperation"
            else backend.execute_sampling_operation
        )
        response = call_with_transient_retry(
            lambda: call(operation, lambda: execute(session_name, request)),
            sleep_fn=backend.backoff,
        )
        submitted.set_result(
            operation_future(backend, session_name, operation, response["operationId"], parse_fn)
        )
    except Exception as exc:  # noqa: BLE001 - surfaces at result(), as a wire submit does
        submitted.set_exception(exc)
    return PendingAPIFuture(submitted, operation_type=operation_type, keepalive=keepalive)


def operation_future(
    backend: Backend,
    session_name: str,
    operation: str,
    operation_id: str,
    parse_fn: Callable[[dict[str, Any]], _T],
) -> APIFuture[_T]:
    """The SDK's polling future, with polls answered by the backend and waits on completion."""
    result_op = _RESULT_OPS[operation]
    get = (
        backend.get_training_operation_result
        if operation == "ExecuteTrainingOperation"
        else backend.get_sampling_operation_result
    )

    def wait(seconds: float) -> None:
        try:
            backend.wait_operation(session_name, operation_id, seconds)
        except Exception:  # noqa: BLE001 - the next poll reports what went wrong
            pass

    async def wait_async(seconds: float) -> None:
        await asyncio.to_thread(wait, seconds)

    return APIFuture(
        operation_id=operation_id,
        poll_fn=lambda: call(result_op, lambda: get(session_name, operation_id)),
        parse_fn=parse_fn,
        status_key="status",
        operation_type="training" if operation == "ExecuteTrainingOperation" else "sample",
        poll_interval=POLL_INTERVAL,
        sleep_fn=wait,
        async_sleep_fn=wait_async,
    )
