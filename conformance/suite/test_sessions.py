"""Session lifecycle: stop idempotency, listing, deletion, quotas, idle expiry
(docs/wire.md#2, #9; docs/semantics.md#4)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conformance.adapter import Backend
from conformance.limits import undeclared
from conformance.suite._kit import TEXT_A, result, sft


def _name(summary: Any) -> str:
    return str(summary.training_session_arn).rsplit("/", 1)[-1]


def _status(service_client: Any, name: str) -> str | None:
    for summary in service_client.list_sessions(name_contains=name):
        if _name(summary) == name:
            return str(getattr(summary.status, "value", summary.status))
    return None


def test_new_session_is_listed_running(
    backend: Backend, service_client: Any, training_client: Any
) -> None:
    assert _status(service_client, training_client.training_session_name) == "Running"


def test_stop_is_idempotent(backend: Backend, service_client: Any, training_client: Any) -> None:
    name = training_client.training_session_name
    training_client.stop()
    training_client.stop()  # absorbed (docs/wire.md#9)
    service_client.stop_session(name)
    assert _status(service_client, name) in ("Stopping", "Stopped")


def test_completed_results_stay_readable_after_stop(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    fb = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    result(fb, backend)
    training_client.stop()
    assert len(result(fb, backend).loss_fn_outputs) == 1


def test_with_block_stops_the_session(
    backend: Backend, service_client: Any, new_training_client: Any
) -> None:
    with new_training_client() as tc:
        name = tc.training_session_name
    assert _status(service_client, name) in ("Stopping", "Stopped")


def test_delete_removes_a_stopped_session(
    backend: Backend, service_client: Any, training_client: Any
) -> None:
    name = training_client.training_session_name
    training_client.stop()
    service_client.delete_session(name)
    assert _status(service_client, name) is None


def test_delete_of_a_running_session_is_refused(
    backend: Backend, service_client: Any, training_client: Any
) -> None:
    name = training_client.training_session_name
    with pytest.raises(ClientError):
        service_client.delete_session(name)
    assert _status(service_client, name) == "Running"


def test_stop_of_an_unknown_session_raises(backend: Backend, service_client: Any) -> None:
    with pytest.raises(ClientError) as info:
        service_client.stop_session("conformance-no-such-session")
    assert info.value.response["Error"]["Code"] in ("ResourceNotFound", "ResourceNotFoundException")


def test_list_sessions_filters(
    backend: Backend, service_client: Any, new_training_client: Any
) -> None:
    a = new_training_client(training_session_name=None)
    b = new_training_client()
    b.stop()
    running = {_name(s) for s in service_client.list_sessions(status_equals="Running")}
    stopped = {_name(s) for s in service_client.list_sessions(status_equals="Stopped")}
    assert a.training_session_name in running and b.training_session_name not in running
    assert b.training_session_name in stopped
    assert service_client.list_sessions(max_results=0) == []
    assert len(service_client.list_sessions(max_results=1)) == 1


@pytest.mark.requires("session.quota")
def test_session_quota(backend: Backend, service_client: Any, new_training_client: Any) -> None:
    limit = backend.limits.max_sessions
    if limit is None:
        pytest.skip(undeclared(backend.name, "max_sessions"))
    active = len(service_client.list_sessions(status_equals="Running"))
    for _ in range(limit - active):
        new_training_client()
    with pytest.raises(ClientError) as info:
        new_training_client()
    assert info.value.response["Error"]["Code"] == "ResourceLimitExceeded"


def _refused_status(exc: BaseException) -> int | None:
    """The HTTP status of a refused call (None for a failed op, which has none)."""
    if isinstance(exc, ClientError):
        return (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return None


def test_a_session_idle_past_the_timeout_expires(
    backend: Backend, ts: Any, service_client: Any, new_training_client: Any
) -> None:
    """docs/semantics.md#4 *Inactivity*: "an idle session becomes Expired" after the
    server's idle timeout T (``--idle-timeout``), and an Expired session accepts no runtime
    op (the SDK's status table, docs/wire.md#9). A session given a forward every T/4 stays
    Running; one left idle for 1.5 T + 5 s (room for a server that sweeps periodically) is
    listed Expired and refuses its next op with a 4xx (or fails it).

    The kept session's gaps are bounded from the client's clock on the safe side (from one
    op's submit to the next op's answer), and asserted only while they stayed under T, so a
    stalled machine cannot fail it."""
    timeout = backend.limits.idle_timeout_s
    if timeout is None:
        pytest.skip(undeclared(backend.name, "idle_timeout_s"))
    silence = 1.5 * timeout + 5.0
    kept, dropped = new_training_client(), new_training_client()
    sent = time.monotonic()
    result(kept.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)
    result(dropped.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)
    quiet_since = time.monotonic()  # the dropped session's last activity ended by now
    while time.monotonic() - quiet_since < silence:
        time.sleep(timeout / 4)
        before = time.monotonic()
        try:
            result(kept.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)
            error = None
        except (ClientError, ts.OperationError) as exc:
            error = exc
        gap, sent = time.monotonic() - sent, before
        if gap >= timeout:  # the machine stalled: the server may rightly expire it now
            break
        assert error is None, (
            f"a session given an op at most {gap:.1f} s after the one before refused the next "
            f"({error!r}; the declared idle timeout is {timeout:g} s)"
        )
        assert _status(service_client, kept.training_session_name) == "Running", (
            f"a session idle for at most {gap:.1f} s is no longer Running "
            f"(the declared idle timeout is {timeout:g} s)"
        )
    quiet = time.monotonic() - quiet_since
    status = _status(service_client, dropped.training_session_name)
    assert status == "Expired", (
        f"a session idle for {quiet:.0f} s is listed {status}, not Expired "
        f"(the declared idle timeout is {timeout:g} s)"
    )
    refused = _refusal(ts, lambda: dropped.forward([sft(ts, TEXT_A)], "cross_entropy"))
    status_code = _refused_status(refused)
    assert status_code is None or 400 <= status_code < 500, (
        f"an op of an Expired session is refused with HTTP {status_code}, not a 4xx"
    )


#: How long a refusal may take to come back: it needs no model work, only a loaded machine.
REFUSAL_S = 60.0


def _refusal(ts: Any, submit: Callable[[], Any]) -> BaseException:
    """What an op refused at the call, or failed within :data:`REFUSAL_S`, raised; the
    test fails if it succeeded or stayed unanswered."""
    try:
        future = submit()
        future.result(timeout=REFUSAL_S)
    except (ClientError, ts.OperationError) as exc:
        return exc
    except (TimeoutError, concurrent.futures.TimeoutError):
        pytest.fail(f"an op of an Expired session was accepted and not answered in {REFUSAL_S:g} s")
    pytest.fail("an op of an Expired session ran")
