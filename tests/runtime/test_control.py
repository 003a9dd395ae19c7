"""The typed control plane (runtime/control.py): a dialect's stop and status, and its model
packages found by the dialect's own key, including in a home written before packages had
keys (the Tinker dialect kept the path in the description then)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from testkit import old_package, stub_service

from localsession.port import EngineConfigError, EngineSpec
from localsession.port_commands import SaveCommand, SessionCommand
from localsession.port_results import OpOutcome, SaveResult
from localsession.runtime.config import ServiceConfig
from localsession.runtime.errors import ServiceError
from localsession.runtime.packages.registry import CHECKPOINT, MODEL, Registry
from localsession.wiring import build_service

PATH = "tinker://run-1:train:0/weights/first"
WAIT_S = 60.0


@pytest.fixture
def service(tmp_path: Path) -> Any:
    service, _ = stub_service(tmp_path)
    yield service
    service.close()


def _save(service: Any, seq: int, key: str | None, checkpoint: bool = True) -> str:
    op = service.submit_training("s1", seq, SaveCommand(checkpoint, "a save", key=key))
    assert service.wait_operation("s1", op, WAIT_S)
    outcome = service.operation_outcome("s1", op)
    assert isinstance(outcome.result, SaveResult), outcome.error
    return str(outcome.result.package_arn)


def test_a_save_records_its_key_and_the_newest_package_of_a_key_is_found(service: Any) -> None:
    first = _save(service, 1, PATH)
    _save(service, 2, None, checkpoint=False)  # no key: never found by one
    again = _save(service, 3, PATH, checkpoint=False)  # an overwrite: the newer one wins
    found = service.control.find_package(PATH, "tinker://")
    assert found is not None and found.arn == again != first
    assert (found.key, found.kind, found.description) == (PATH, MODEL, "a save")
    assert (found.base_model, found.rank, found.session) == ("localsession/tiny", 4, "s1")
    assert (found.group, found.version) == ("sagemaker-default", 3)
    keyed = service.control.keyed_packages("tinker://")
    assert [p.arn for p in keyed] == [again, first]
    assert service.control.package(first).kind == CHECKPOINT
    assert service.control.find_package("tinker://run-1:train:0/weights/other") is None
    assert [p.version for p in service.control.packages_of("s1")] == [3, 2, 1]
    assert service.control.packages_of("another") == []


def test_a_home_written_before_keys_still_finds_its_paths(tmp_path: Path) -> None:
    old = old_package(tmp_path, PATH)
    plain = old_package(tmp_path, "a SageMaker save")
    service = build_service(ServiceConfig(home=tmp_path))
    try:
        found = service.control.find_package(PATH, "tinker://")
        assert found is not None and (found.arn, found.key, found.rank) == (old, PATH, 8)
        assert found.description == PATH
        assert [p.arn for p in service.control.keyed_packages("tinker://")] == [old]
        # without the dialect's prefix a description is never taken for a key
        assert service.control.find_package(PATH) is None
        assert service.control.package(plain).key == ""
    finally:
        service.close()


def _package_with(registry: Registry, adapter: str | None) -> str:
    def write(folder: Path) -> None:
        if adapter is not None:
            (folder / "adapter_config.json").write_text(adapter)

    return registry.create(
        "g",
        kind=MODEL,
        base_model="m",
        lora_rank=1,
        lora_alpha=1,
        description="",
        session="s",
        merged=False,
        write=write,
    ).arn


def test_adapts_head_reads_the_adapters_target_modules(tmp_path: Path) -> None:
    service = build_service(ServiceConfig(home=tmp_path))
    registry = service.registry
    cases = {
        json.dumps({"target_modules": ["q_proj", "v_proj", "lm_head"]}): True,
        json.dumps({"target_modules": ["q_proj", "v_proj"]}): False,
        json.dumps({"target_modules": "lm_head"}): False,  # not a list: peft's regex form
        "{not json": False,
        None: False,  # no adapter config (the fakes' packages)
    }
    try:
        for adapter, expected in cases.items():
            arn = _package_with(registry, adapter)
            assert service.control.package(arn).adapts_head is expected, adapter
    finally:
        service.close()


def test_delete_package_removes_it_and_its_key(service: Any) -> None:
    arn = _save(service, 1, PATH)
    folder = service.control.package_dir(arn)
    assert folder.is_dir() and service.control.package_dir_at("sagemaker-default", 1) == folder
    service.control.delete_package(arn)
    assert service.control.find_package(PATH, "tinker://") is None
    assert service.control.package_dir_at("sagemaker-default", 1) is None
    assert service.control.package_dir_at("../escape", 1) is None  # not a group name
    with pytest.raises(ServiceError, match="does not exist"):
        service.control.package_dir(arn)
    assert not folder.exists()


def test_stop_and_state(service: Any) -> None:
    state = service.control.state("s1")
    assert (state.name, state.status, state.error) == ("s1", "Running", None)
    service.control.stop("s1")
    assert service.control.state("s1").status in ("Stopping", "Stopped")
    service.control.stop("s1")  # already stopping or stopped: left as it is
    with pytest.raises(ServiceError) as unknown:
        service.control.state("nobody")
    assert unknown.value.http_status == 404
    with pytest.raises(ServiceError):
        service.control.stop("nobody")


def test_a_failed_start_is_reported_with_its_error(tmp_path: Path) -> None:
    def factory(spec: EngineSpec) -> Any:
        raise EngineConfigError("no accelerator here: set LOCALSESSION_DEVICE=cpu")

    service = build_service(ServiceConfig(home=tmp_path, engine_factory=factory))
    try:
        service.create_session(SessionCommand("broken", "localsession/tiny", 4, 8))
        assert service.wait_for_session("broken", WAIT_S) == "Failed"
        state = service.control.state("broken")
        assert state.status == "Failed"
        assert state.error is not None and "LOCALSESSION_DEVICE=cpu" in state.error
        # a session made from a typed command describes its LoRA, model and a role
        detail = service.describe_training_session({"TrainingSessionName": "broken"})
        described = detail["TrainingSessionDetail"]
        assert described["LoraConfig"] == {"Rank": 4, "Alpha": 8}
        assert described["ModelConfig"] == {"BaseModelArn": "localsession/tiny"}
        assert described["RoleArn"].endswith(":role/localsession")
    finally:
        service.close()


def test_when_done_hands_the_outcome_once_the_op_ends(service: Any) -> None:
    seen: list[OpOutcome] = []
    ended = threading.Event()

    def done(outcome: OpOutcome) -> None:
        seen.append(outcome)
        ended.set()

    op = service.submit_training("s1", 1, SaveCommand(False, key=PATH))
    service.control.when_done("s1", op, done)
    assert service.wait_operation("s1", op, WAIT_S) and ended.wait(WAIT_S)
    (outcome,) = seen
    assert outcome.status == "Completed" and isinstance(outcome.result, SaveResult)
    assert outcome.error is None
    service.control.when_done("s1", op, done)  # already ended: called at once
    assert len(seen) == 2 and seen[1] == outcome
    with pytest.raises(ServiceError, match="does not exist"):
        service.control.when_done("s1", "no-such-op", done)
