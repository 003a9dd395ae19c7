"""Session records across service restarts (runtime/sessions/persist.py), without torch: a stub
engine stands in, since only the runtime's bookkeeping is under test here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from testkit import stub_service

from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service


def _service(home: Path) -> Service:
    return stub_service(home, session=None, persist_sessions=True, max_sessions=8)[0]


def _create(service: Service, name: str) -> None:
    service.create_training_session(
        {
            "TrainingSessionName": name,
            "LoraConfig": {"Rank": 4, "Alpha": 8},
            "ModelConfig": {"BaseModelArn": "localsession/tiny"},
            "Tags": [{"Key": "team", "Value": "rl"}],
        }
    )
    assert service.wait_for_session(name, 10) == "Running"


def _detail(service: Service, name: str) -> dict[str, Any]:
    return dict(
        service.describe_training_session({"TrainingSessionName": name})["TrainingSessionDetail"]
    )


def test_a_restart_fails_live_sessions_and_keeps_the_rest(tmp_path: Path) -> None:
    first = _service(tmp_path)
    for name in ("live", "stopped", "gone"):
        _create(first, name)
    first.stop_training_session({"TrainingSessionName": "stopped"})
    first.stop_training_session({"TrainingSessionName": "gone"})
    first.delete_training_session({"TrainingSessionName": "gone"})
    before = _detail(first, "live")
    # A crash: the first service is never closed; a second one starts on the same home.
    (tmp_path / "sessions" / ".live.deadbeef.tmp").write_text("{half a rec")
    (tmp_path / "sessions" / "corrupt.json").write_text("{not json")
    (tmp_path / "sessions" / "..json").write_text("{}")
    second = _service(tmp_path)
    live = _detail(second, "live")
    assert live["TrainingSessionStatus"] == "Failed"
    assert "server restarted while this session was Running" in live["ErrorDetails"]
    assert live["CreationTime"] == before["CreationTime"]
    assert live["Tags"] == [{"Key": "team", "Value": "rl"}]
    assert live["EndTime"] >= before["LastModifiedTime"]
    assert _detail(second, "stopped")["TrainingSessionStatus"] == "Stopped"
    names = {
        s["TrainingSessionName"]
        for s in second.list_training_sessions({})["TrainingSessionSummaries"]
    }
    assert names == {"live", "stopped"}  # deleted and unreadable records are not sessions
    assert not list((tmp_path / "sessions").glob("*.tmp"))  # interrupted writes swept
    # Restored sessions are terminal: no work, no stop, but deletable; the name is free after.
    with pytest.raises(ServiceError) as refused:
        second.execute_training_operation(
            "live", {"sequenceNumber": 1, "operationConfig": {"saveState": {}}}
        )
    assert refused.value.code == "ConflictException"
    with pytest.raises(ServiceError) as not_stoppable:
        second.stop_training_session({"TrainingSessionName": "live"})
    assert "invalid session state transition from Failed to Stopping" in not_stoppable.value.message
    second.delete_training_session({"TrainingSessionName": "live"})
    _create(second, "live")
    record = json.loads((tmp_path / "sessions" / "live.json").read_text())
    assert record["status"] == "Running"
    # A clean shutdown records Stopped, which a restart keeps as it is.
    second.close()
    third = _service(tmp_path)
    assert _detail(third, "live")["TrainingSessionStatus"] == "Stopped"
    third.close()
    first.close()


def test_records_are_off_unless_asked_for(tmp_path: Path) -> None:
    service = stub_service(tmp_path, session=None)[0]
    _create(service, "inproc")
    service.close()
    assert not (tmp_path / "sessions").exists()
