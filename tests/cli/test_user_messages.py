"""Messages a user can act on (issue 21, items 2 and 5): the lost-sequence warning says what
happened in plain words, the strict ``max_tokens`` floor keeps the SDK's error and adds the
relaxed hint, a bad ``LOCALSESSION_DEVICE`` is refused when the service is built, naming the
variable and its choices, an engine that cannot start logs one line without a traceback, and
a save into an unwritable home names the path."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from botocore.exceptions import ParamValidationError

from localsession import ServiceClient
from localsession.engine_options import EngineOptions, SettingError
from localsession.exceptions import OperationError
from localsession.port import AdamHyperparams, EngineSpec
from localsession.port_results import OptimResult
from localsession.runtime.service import Service, ServiceConfig
from localsession.types import SamplingParams
from localsession.wiring import build_service

ROLE = "arn:aws:iam::000000000000:role/localsession-tests"


class StubEngine:
    """Starts at once; an optimizer step does nothing and reports no metrics."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def optim_step(self, params: AdamHyperparams) -> OptimResult:
        return OptimResult({})

    def close(self) -> None:
        pass


def _session(service: Service, name: str) -> None:
    service.create_training_session(
        {
            "TrainingSessionName": name,
            "LoraConfig": {"Rank": 4, "Alpha": 8},
            "ModelConfig": {"BaseModelArn": "localsession/tiny"},
        }
    )


def test_the_lost_sequence_warning_says_what_happened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = build_service(
        ServiceConfig(home=tmp_path, gap_timeout=0.2, engine_factory=StubEngine)  # type: ignore[arg-type]
    )
    try:
        _session(service, "gappy")
        assert service.wait_for_session("gappy", 10) == "Running"
        step = {"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-3}}}
        with caplog.at_level(
            logging.WARNING, logger="localsession.runtime.sessions.training_queue"
        ):
            op = service.execute_training_operation(
                "gappy", {"sequenceNumber": 3, "operationConfig": step}
            )["operationId"]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "never arrived" not in caplog.text:
                time.sleep(0.05)
        (record,) = [r for r in caplog.records if "never arrived" in r.getMessage()]
        text = record.getMessage()
        assert "operation numbers 1-2 never arrived" in text
        assert "refused (for example by validation)" in text
        assert "nothing is wrong with them" in text and "--lenient-sequence" in text
        assert "recorded as lost" not in text
        assert service.wait_operation("gappy", op, 10)  # the later op ran after the wait
        result = service.get_training_operation_result("gappy", op)
        assert "Completed" in str(result), result
    finally:
        service.close()


def test_a_max_tokens_floor_keeps_the_sdk_error_and_adds_the_relaxed_hint(
    client: ServiceClient,
) -> None:
    tc = client.create_lora_training_client("localsession/tiny", rank=4, alpha=8)
    try:
        sampler = tc.create_sampling_client()
        with pytest.raises(ParamValidationError) as refused:
            sampler.sample([1, 2, 3], 1, SamplingParams(max_tokens=10)).result()
        message = str(refused.value)
        assert "maxTokens, value: 10, valid min value: 512" in message  # the SDK's own words
        assert "strict=False" in message and "--relaxed" in message
    finally:
        tc.stop()


def test_a_bad_device_setting_is_refused_before_any_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSESSION_DEVICE", "gpu")
    with pytest.raises(SettingError, match="LOCALSESSION_DEVICE='gpu': expected 'cpu' or 'cuda'"):
        build_service(ServiceConfig(home=tmp_path))


def test_an_engine_that_cannot_start_is_one_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # cuda asked, none here
    config = ServiceConfig(home=tmp_path, engine_options=EngineOptions(device="cuda"))
    service = build_service(config)
    try:
        with caplog.at_level(logging.ERROR, logger="localsession.runtime.sessions.runner"):
            _session(service, "wrong-device")
            assert service.wait_for_session("wrong-device", 60) == "Failed"
        (record,) = [r for r in caplog.records if "failed to load" in r.getMessage()]
        assert record.exc_info is None  # no traceback
        assert "LOCALSESSION_DEVICE=cuda but torch sees no CUDA device" in record.getMessage()
    finally:
        service.close()


def test_a_save_into_an_unwritable_home_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    home = tmp_path / "a-file" / "home"
    service = build_service(ServiceConfig(home=home))
    try:
        tc = ServiceClient(role_arn=ROLE, backend=service).create_lora_training_client(
            "localsession/tiny", rank=4, alpha=8
        )
        with pytest.raises(OperationError) as failed:
            tc.save_state("ckpt").result()
        message = str(failed.value)
        assert str(home / "packages") in message and "LOCALSESSION_HOME" in message
        tc.stop()
    finally:
        service.close()


def test_a_merged_save_draws_no_progress_bar(
    client: ServiceClient, capfd: pytest.CaptureFixture[str]
) -> None:
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    tc = client.create_lora_training_client("localsession/tiny", rank=4, alpha=8)
    try:
        capfd.readouterr()
        tc.save_weights_for_sampler("merged", merge_weights=True).result()
        out, err = capfd.readouterr()
        assert "Writing model shards" not in out + err
        assert hf_logging.is_progress_bar_enabled()  # the user's setting is restored
    finally:
        tc.stop()
