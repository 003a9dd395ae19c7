"""The runtime's ordered training queue, with a recording engine (no torch).

Checks sequence order, idempotent retries, sequence-number reuse, gaps (Blocked, then lost
after the gap timeout), failures that change nothing, and Skipped ops on stop.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from testkit import forward_backward, stub_service

from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service


def fb(seq: int, tag: int, token: str = "", loss: str = "cross_entropy") -> dict[str, Any]:
    return forward_backward(seq, tag, token=token, loss=loss)


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    """A stub-engine service whose ``ppo`` forwards fail, with session ``s1`` Running."""
    service, engines = stub_service(tmp_path, fail_loss="ppo", gap_timeout=0.3)
    yield service, engines
    service.close()


def result(service: Service, op_id: str) -> dict[str, Any]:
    assert service.wait_operation("s1", op_id, 120)  # a hang detector
    return service.get_training_operation_result("s1", op_id)


def test_out_of_order_arrival_runs_in_sequence_order(tmp_path: Path) -> None:
    # A gap timeout no loaded machine reaches: op 2 must still be Blocked when op 1 comes.
    service, engines = stub_service(tmp_path, fail_loss="ppo", gap_timeout=600.0)
    try:
        late = service.execute_training_operation("s1", fb(2, 20))["operationId"]
        deadline = time.monotonic() + 600.0
        while time.monotonic() < deadline:
            detail = service.describe_training_session({"TrainingSessionName": "s1"})
            if detail["TrainingSessionDetail"]["TrainingSessionStatus"] == "Blocked":
                break
            time.sleep(0.005)
        assert detail["TrainingSessionDetail"]["TrainingSessionStatus"] == "Blocked"
        assert "sequence number 1" in detail["TrainingSessionDetail"]["ErrorDetails"]
        first = service.execute_training_operation("s1", fb(1, 10))["operationId"]
        assert result(service, late)["status"] == "Completed"
        assert result(service, first)["status"] == "Completed"
        assert engines[0].calls == ["fb10", "fb20"]
        detail = service.describe_training_session({"TrainingSessionName": "s1"})[
            "TrainingSessionDetail"
        ]
        assert detail["TrainingSessionStatus"] == "Running"
        assert detail["LastReceivedSequenceNumber"] == 2
    finally:
        service.close()


def test_retry_returns_the_original_id_and_reuse_is_refused(runtime: Any) -> None:
    service, _ = runtime
    op = service.execute_training_operation("s1", fb(1, 10, token="abc"))["operationId"]
    assert service.execute_training_operation("s1", fb(1, 10, token="abc"))["operationId"] == op
    with pytest.raises(ServiceError) as info:
        service.execute_training_operation("s1", fb(1, 11, token="other"))
    assert info.value.code == "ValidationException" and "sequenceNumber 1" in info.value.message


def test_a_gap_is_recorded_lost_after_the_timeout(runtime: Any) -> None:
    service, engines = runtime
    started = time.monotonic()
    op = service.execute_training_operation("s1", fb(3, 30))["operationId"]
    assert result(service, op)["status"] == "Completed"
    assert time.monotonic() - started >= 0.3
    assert engines[0].calls == ["fb30"]
    with pytest.raises(ServiceError, match="behind"):
        service.execute_training_operation("s1", fb(1, 10))


def test_failed_op_does_not_stop_later_ops(runtime: Any) -> None:
    service, engines = runtime
    bad = service.execute_training_operation("s1", fb(1, 10, loss="ppo"))["operationId"]
    good = service.execute_training_operation("s1", fb(2, 20))["operationId"]
    assert result(service, bad) == {
        "status": "Failed",
        "errorDetails": "datum 0: `advantages` is missing",
    }
    assert result(service, good)["status"] == "Completed"
    assert engines[0].calls == ["fb20"]


def test_structural_errors_are_refused_before_taking_a_number(runtime: Any) -> None:
    service, _ = runtime
    broken = fb(1, 10)
    broken["operationConfig"]["forwardBackward"]["datumList"] = []
    with pytest.raises(ServiceError, match="datumList"):
        service.execute_training_operation("s1", broken)
    two = fb(1, 10)
    two["operationConfig"]["optimizerStep"] = {"adamParamsConfig": {"learningRate": 1e-4}}
    with pytest.raises(ServiceError, match="exactly one"):
        service.execute_training_operation("s1", two)
    op = service.execute_training_operation("s1", fb(1, 10))["operationId"]
    assert result(service, op)["status"] == "Completed"
    with pytest.raises(ServiceError) as info:
        service.get_training_operation_result("s1", "no-such-op")
    assert info.value.code == "ResourceNotFoundException" and info.value.http_status == 404


def test_stop_skips_queued_ops_and_refuses_new_ones(runtime: Any) -> None:
    service, _ = runtime
    queued = service.execute_training_operation("s1", fb(2, 20))["operationId"]
    service.stop_training_session({"TrainingSessionName": "s1"})
    assert result(service, queued)["status"] == "Skipped"
    with pytest.raises(ServiceError) as info:
        service.execute_training_operation("s1", fb(1, 10))
    assert info.value.code == "ConflictException" and info.value.http_status == 409
    with pytest.raises(ServiceError, match="invalid session state transition from Stopped to "):
        service.stop_training_session({"TrainingSessionName": "s1"})
