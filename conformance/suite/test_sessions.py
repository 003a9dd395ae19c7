"""Session lifecycle: stop idempotency, listing, deletion, quotas (docs/wire.md#2, #9;
docs/semantics.md#4)."""

from __future__ import annotations

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
