"""The runtime's typed entry points (port_commands in, port_results out), the calls a
dialect with a wire of its own makes, and the sequence numbers they consume.

Every session here waits 600 s for a missing sequence number, so an op that waited for a
refused number would never finish within the tests' waits: finishing at all is the check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from testkit import stub_service

from localsession.port import AdamHyperparams, SampleRequest, TrainingDatum
from localsession.port_commands import (
    ForwardCommand,
    LoadCommand,
    OptimCommand,
    SampleCommand,
    SessionCommand,
)
from localsession.port_results import ForwardResult, OptimResult, SampleResult
from localsession.runtime.errors import ServiceError

#: Long enough that no test here could finish if an op waited out a gap.
GAP_S = 600.0
#: How long a test waits for an op that should run at once (a loaded machine included).
WAIT_S = 60.0


@pytest.fixture
def service(tmp_path: Path) -> Any:
    service, _ = stub_service(tmp_path, gap_timeout=GAP_S)
    yield service
    service.close()


def _forward(tag: int = 1, loss: str = "cross_entropy") -> ForwardCommand:
    return ForwardCommand([TrainingDatum([tag], {"target_tokens": [0]})], loss)


def _completed(service: Any, op_id: str) -> Any:
    assert service.wait_operation("s1", op_id, WAIT_S), "the op waited (for a gap?)"
    outcome = service.operation_outcome("s1", op_id)
    assert outcome.status == "Completed", outcome.error
    return outcome.result


def test_typed_training_ops_run_in_order_and_return_typed_results(service: Any) -> None:
    first = service.submit_training("s1", 1, _forward())
    with pytest.raises(ServiceError, match=r"learning_rate=0.5 is outside the service range"):
        service.submit_training("s1", 2, OptimCommand(AdamHyperparams(learning_rate=0.5)))
    second = service.submit_training("s1", 3, OptimCommand(AdamHyperparams(learning_rate=5e-3)))
    assert isinstance(_completed(service, first), ForwardResult)
    step = _completed(service, second)
    assert step == OptimResult({"learning_rate": 5e-3})  # what the stub engine reports
    # the SageMaker dialect reads the same op in its own shape
    wire = service.get_training_operation_result("s1", second)
    assert wire["operationResult"] == {"optimizerStep": {"metrics": {"learning_rate": 5e-3}}}


def test_a_command_the_runtime_refuses_consumes_its_number(service: Any) -> None:
    with pytest.raises(ServiceError, match="loss_fn 'nope' is not one of"):
        service.submit_training("s1", 1, _forward(loss="nope"))
    with pytest.raises(ServiceError, match="is not a model package version ARN"):
        service.submit_training("s1", 2, LoadCommand("not-an-arn", load_optimizer=False))
    after = service.submit_training("s1", 3, _forward())
    assert isinstance(_completed(service, after), ForwardResult)


def test_a_number_a_dialect_refused_does_not_hold_up_the_next_op(service: Any) -> None:
    service.refuse_sequence("s1", 1)  # e.g. a loss the dialect does not run
    after = service.submit_training("s1", 2, _forward())
    assert isinstance(_completed(service, after), ForwardResult)
    # a number already used is left alone: its op still ran, and the next number is free
    service.refuse_sequence("s1", 2)
    last = service.submit_training("s1", 3, _forward())
    assert isinstance(_completed(service, last), ForwardResult)


def test_without_the_refusal_a_missing_number_holds_the_next_op(service: Any) -> None:
    """The control: the same op behind a number nobody reported waits (here, past 0.5 s)."""
    held = service.submit_training("s1", 2, _forward())
    assert not service.wait_operation("s1", held, 0.5)
    assert service.session("s1").waits_for_earlier(held)
    service.refuse_sequence("s1", 1)
    assert isinstance(_completed(service, held), ForwardResult)


def test_typed_sample_and_its_checks(service: Any) -> None:
    request = SampleRequest(prompt=[1, 2], num_samples=2, max_tokens=3)
    op_id = service.submit_sample("s1", SampleCommand(request, seed=3))
    result = _completed(service, op_id)
    assert isinstance(result, SampleResult) and result.prompt_tokens == 2
    for bad, message in (
        (SampleRequest(prompt=[]), "prompt must hold"),
        (SampleRequest(prompt=[1], top_p=1.5), "top_p=1.5"),
        (SampleRequest(prompt=[1], stop_token_ids=(-1,)), "stop token id -1"),
    ):
        with pytest.raises(ServiceError, match=message):
            service.submit_sample("s1", SampleCommand(bad))
    with pytest.raises(ServiceError, match="seed='x' must be an integer"):
        service.submit_sample("s1", SampleCommand(request, seed="x"))  # type: ignore[arg-type]


def test_create_session_checks_the_rank_bound(service: Any) -> None:
    command = SessionCommand(name="big", base_model="localsession/tiny", rank=257, alpha=32)
    with pytest.raises(ServiceError, match=r"LoRA rank 257 must be an integer in \[1, 256\]"):
        service.create_session(command)
    arn = service.create_session(SessionCommand("ok", "localsession/tiny", rank=256, alpha=32))
    assert arn.endswith(":training-session/ok")
    assert service.wait_for_session("ok", WAIT_S) == "Running"
    detail = service.describe_training_session({"TrainingSessionName": "ok"})
    assert detail["TrainingSessionDetail"]["TrainingSessionName"] == "ok"
