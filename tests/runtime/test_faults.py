"""Injected faults (runtime/faults.py): the Faults object alone, then its hooks in a Service.

The Service runs a recording engine (no torch), so each test checks exactly which requests
were refused with which code, which ops failed with which message, and that a failed op never
reached the engine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from testkit import forward_backward, stub_service

from localsession.runtime.errors import ServiceError
from localsession.runtime.faults import Faults
from localsession.runtime.service import Service

# -- Faults on its own ---------------------------------------------------------------------


def test_idle_faults_are_disarmed_and_do_nothing() -> None:
    faults = Faults()
    assert faults.armed is False
    faults.on_request()
    faults.on_submit("forwardBackward")
    assert faults.on_execute("forwardBackward") is None
    assert faults.on_start("forwardBackward") == 0.0
    assert faults.pending() == {"throttle": 0, "failures": [], "slow": []}


def test_throttle_refuses_exactly_count_requests_with_429() -> None:
    faults = Faults()
    faults.throttle_next(2)
    for _ in range(2):
        with pytest.raises(ServiceError) as info:
            faults.on_request()
        assert (info.value.code, info.value.http_status) == ("ThrottlingException", 429)
    assert faults.armed is False
    faults.on_request()  # the third request passes


def test_execution_fault_matches_kind_aliases_and_is_consumed() -> None:
    faults = Faults()
    faults.fail_next("optim_step", 2, message="CUDA out of memory")
    assert faults.on_execute("forwardBackward") is None  # another kind: untouched
    assert faults.on_execute("optimizerStep") == "CUDA out of memory"
    assert faults.pending()["failures"][0]["remaining"] == 1
    assert faults.on_execute("optimizerStep") == "CUDA out of memory"
    assert faults.on_execute("optimizerStep") is None
    assert faults.armed is False


def test_submit_fault_raises_its_code_and_status() -> None:
    faults = Faults()
    faults.fail_next("*", at="submit", code="ConflictException", message="busy")
    assert faults.on_execute("sample") is None  # a submit fault never fires at execution
    with pytest.raises(ServiceError) as info:
        faults.on_submit("sample")
    assert (info.value.code, info.value.http_status, info.value.message) == (
        "ConflictException",
        409,
        "busy",
    )
    faults.on_submit("sample")  # consumed


def test_default_submit_code_is_validation_and_message_names_the_kind() -> None:
    faults = Faults()
    faults.fail_next(["saveWeights", "saveState"], at="submit")
    with pytest.raises(ServiceError) as info:
        faults.on_submit("saveState")
    assert info.value.code == "ValidationException" and info.value.http_status == 400
    assert "saveState" in info.value.message


def test_faults_fire_in_arming_order_and_clear_drops_them() -> None:
    faults = Faults()
    faults.fail_next("forwardBackward", message="first")
    faults.fail_next("*", message="second")
    assert faults.on_execute("forwardBackward") == "first"
    assert faults.on_execute("forwardBackward") == "second"
    faults.fail_next("sample")
    faults.throttle_next(3)
    faults.clear()
    assert faults.armed is False
    assert faults.pending() == {"throttle": 0, "failures": [], "slow": []}


def test_slow_fault_delays_exactly_count_ops_of_its_kind() -> None:
    faults = Faults()
    faults.slow_next("forward_backward", 2.5, count=2)
    assert faults.armed
    assert faults.pending()["slow"] == [
        {"kinds": ["forwardBackward"], "remaining": 2, "seconds": 2.5}
    ]
    assert faults.on_start("optimizerStep") == 0.0  # another kind: untouched
    assert [faults.on_start("forwardBackward") for _ in range(3)] == [2.5, 2.5, 0.0]
    assert faults.armed is False
    faults.slow_next("*", 1)
    faults.clear()
    assert faults.on_start("sample") == 0.0


@pytest.mark.parametrize("seconds", [0, -1.0, 3601, "6", True, None])
def test_slow_fault_refuses_a_bad_duration(seconds: Any) -> None:
    with pytest.raises(ValueError, match="slow seconds"):
        Faults().slow_next("sample", seconds)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("forwardbackward",), {}, "not an operation kind"),
        (("sample", 0), {}, "count"),
        (("sample", True), {}, "count"),
        (("sample",), {"at": "later"}, "at="),
        (("sample",), {"code": "ValidationException"}, "no error code"),
        (("sample",), {"at": "submit", "code": "Teapot"}, "fault code"),
        (([],), {}, "at least one"),
    ],
)
def test_bad_arguments_are_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        Faults().fail_next(*args, **kwargs)
    with pytest.raises(ValueError, match="count"):
        Faults().throttle_next(0)


# -- the hooks in a Service -----------------------------------------------------------------


def fb(seq: int) -> dict[str, Any]:
    return forward_backward(seq)


SAMPLE = {
    "operationConfig": {
        "sample": {
            "prompt": {"chunks": [{"tokens": [1, 2]}]},
            "numSamples": 1,
            "samplingParams": {"maxTokens": 512, "seed": 0},
        }
    }
}


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    service, engines = stub_service(tmp_path, gap_timeout=60.0)
    yield service, engines
    service.close()


def outcome(service: Service, op_id: str, sampling: bool = False) -> dict[str, Any]:
    assert service.wait_operation("s1", op_id, 10)
    if sampling:
        return service.get_sampling_operation_result("s1", op_id)
    return service.get_training_operation_result("s1", op_id)


def test_service_throttles_submits_and_polls(runtime: Any) -> None:
    service, engines = runtime
    service.faults.throttle_next(2)
    for _ in range(2):
        with pytest.raises(ServiceError, match="throttled"):
            service.execute_training_operation("s1", fb(1))
    op = service.execute_training_operation("s1", fb(1))["operationId"]  # same number: accepted
    service.faults.throttle_next(1)
    with pytest.raises(ServiceError, match="throttled"):
        service.get_training_operation_result("s1", op)
    assert outcome(service, op)["status"] == "Completed"
    service.faults.throttle_next(1)
    with pytest.raises(ServiceError, match="throttled"):
        service.execute_sampling_operation("s1", SAMPLE)
    assert engines[0].calls == ["fb1"]


def test_execution_fault_fails_the_op_without_reaching_the_engine(runtime: Any) -> None:
    service, engines = runtime
    service.faults.fail_next("forwardBackward", message="boom")
    failed = service.execute_training_operation("s1", fb(1))["operationId"]
    later = service.execute_training_operation("s1", fb(2))["operationId"]
    assert outcome(service, failed) == {"status": "Failed", "errorDetails": "boom"}
    assert outcome(service, later)["status"] == "Completed"
    assert engines[0].calls == ["fb1"]  # only the second op ran
    status = service.describe_training_session({"TrainingSessionName": "s1"})
    assert status["TrainingSessionDetail"]["TrainingSessionStatus"] == "Running"


def test_sampling_execution_fault_fails_the_op(runtime: Any) -> None:
    service, engines = runtime
    service.faults.fail_next("sample")
    op = service.execute_sampling_operation("s1", SAMPLE)["operationId"]
    result = outcome(service, op, sampling=True)
    assert result["status"] == "Failed" and "sample failed" in result["errorDetails"]
    ok = service.execute_sampling_operation("s1", SAMPLE)["operationId"]
    assert outcome(service, ok, sampling=True)["status"] == "Completed"
    assert engines[0].calls == ["sample"]


def test_submit_fault_refuses_before_the_number_is_recorded(runtime: Any) -> None:
    service, engines = runtime
    service.faults.fail_next("forwardBackward", at="submit", code="InternalServerException")
    with pytest.raises(ServiceError) as info:
        service.execute_training_operation("s1", fb(1))
    assert (info.value.code, info.value.http_status) == ("InternalServerException", 500)
    op = service.execute_training_operation("s1", fb(1))["operationId"]  # the retry is accepted
    assert outcome(service, op)["status"] == "Completed"
    assert engines[0].calls == ["fb1"]


def test_a_slow_op_running_at_stop_completes_and_the_queued_one_is_skipped(
    runtime: Any,
) -> None:
    """The in-process stop semantics (docs/semantics.md#4) with an op running: it finishes
    Completed, the op queued behind it ends Skipped."""
    service, engines = runtime
    service.faults.slow_next("forwardBackward", 0.5)
    running = service.execute_training_operation("s1", fb(1))["operationId"]
    queued = service.execute_training_operation("s1", fb(2))["operationId"]
    session = service.session("s1")
    while session.running_op is None:
        time.sleep(0.01)
    assert session.runs_behind_another(queued) and not session.runs_behind_another(running)
    service.stop_training_session({"TrainingSessionName": "s1"})
    assert outcome(service, queued)["status"] == "Skipped"
    assert outcome(service, running)["status"] == "Completed"
    assert engines[0].calls == ["fb1"]


def test_expire_session_skips_queued_ops_and_refuses_new_ones(runtime: Any) -> None:
    service, _ = runtime
    queued = service.execute_training_operation("s1", fb(2))["operationId"]  # waits for #1
    service.expire_session("s1")
    assert outcome(service, queued)["status"] == "Skipped"
    detail = service.describe_training_session({"TrainingSessionName": "s1"})
    assert detail["TrainingSessionDetail"]["TrainingSessionStatus"] == "Expired"
    with pytest.raises(ServiceError) as info:
        service.execute_training_operation("s1", fb(3))
    assert info.value.code == "ConflictException"
    with pytest.raises(ServiceError) as missing:
        service.expire_session("nope")
    assert missing.value.code == "ResourceNotFound"
