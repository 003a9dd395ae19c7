"""The server's two holds (docs/wire.md#6): an ``Execute*Operation`` answer held until its op
finishes, and a result poll of a running op held until it finishes. Together they promise
that the SDK never leaves a completed op waiting for its next 2 s poll, while
``result(timeout=t)`` still ends on time (tests/differential/test_wire_timeout.py).

Counted, not timed, where it can be: the number of result polls the SDK makes, and whether
each answer came before or after its op finished."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from testkit import StubEngine, create_request

from localsession import vocab
from localsession.port import EngineSpec, SampleRequest
from localsession.runtime.models.catalog import StaticCatalog
from localsession.runtime.service import Service, ServiceConfig
from localsession.server.app import (
    MAX_HELD_SAMPLING,
    MAX_SUBMIT_HOLD_SECONDS,
    SUBMIT_HOLD_SECONDS,
    check_submit_hold,
)
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import default_engine_factory

from .common import GROUP, REGION, ROLE, S3

OP_S = 0.8  # each slow op's duration: longer than the short poll hold used below


class _Slow:
    """An engine whose forward_backward and sample each take ``OP_S`` first."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(OP_S)
        return self._engine.forward_backward(*args, **kwargs)

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> Any:
        time.sleep(OP_S)
        return self._engine.sample(weights, requests)


def _stub_service(home: Path, **config: Any) -> Service:
    """A service over slow stub engines, with a Running session ``s1``."""

    def factory(spec: EngineSpec) -> Any:
        return _Slow(StubEngine(spec))

    service = Service(
        ServiceConfig(home=home, engine_factory=factory, **config),
        catalog=StaticCatalog(["localsession/tiny"], accept_any=True),
    )
    service.create_training_session(create_request("s1"))
    assert service.wait_for_session("s1", 10) == "Running"
    return service


def _count_polls(service: Service) -> list[str]:
    """Wrap the service's result reads; the returned list gets each answer's status."""
    seen: list[str] = []
    for name in ("get_training_operation_result", "get_sampling_operation_result"):
        original = getattr(service, name)

        def counted(*args: Any, _original: Any = original) -> dict[str, Any]:
            answer: dict[str, Any] = _original(*args)
            seen.append(answer["status"])
            return answer

        setattr(service, name, counted)
    return seen


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``runtime(url)``: a botocore runtime client as the SDK builds one."""

    def make(url: str) -> Any:
        for key, value in client_env(url, REGION).items():
            monkeypatch.setenv(key, value)
        config = Config(retries={"total_max_attempts": 1}, max_pool_connections=32)
        return boto3.Session().client("sagemakertrainingsessionruntime", config=config)

    yield make


def _fb(seq: int) -> dict[str, Any]:
    return {
        "sequenceNumber": seq,
        "clientToken": f"token-{seq}",
        "operationConfig": {
            "forwardBackward": {
                "lossFnName": "cross_entropy",
                "datumList": [
                    {"modelInput": {"chunks": [{"tokens": [seq], "type": "encoded_text"}]}}
                ],
            }
        },
    }


@pytest.mark.parametrize(
    "submit_hold", [SUBMIT_HOLD_SECONDS, 0.0], ids=["held", "answered-at-once"]
)
def test_the_sdk_reads_a_slow_op_in_one_poll_when_its_submit_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, submit_hold: float
) -> None:
    """An op longer than the poll hold: with the submit held, the SDK's first poll finds it
    Completed; answered at once (the control), the SDK polls at least twice, sleeping its
    2 s interval in between while the op is already done."""
    from sagemaker.train.training_session import Datum, ModelInput, ServiceClient

    service = Service(
        ServiceConfig(
            home=tmp_path, engine_factory=lambda spec: _Slow(default_engine_factory(spec))
        )
    )
    polls = _count_polls(service)
    try:
        with ServerThread(service, long_poll=0.2, submit_hold=submit_hold) as url:
            for key, value in client_env(url, REGION).items():
                monkeypatch.setenv(key, value)
            sdk = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
            with sdk.create_lora_training_client(base_model="localsession-tiny", rank=4) as tc:
                datum = Datum(
                    model_input=ModelInput.from_ints([257, 1, 2]),
                    loss_fn_inputs={"target_tokens": [1, 2, 3], "weights": [1.0, 1.0, 1.0]},
                )
                out = tc.forward_backward([datum], "cross_entropy").result(timeout=60)
    finally:
        service.close()
    assert out.metrics["loss"] > 0
    if submit_hold:
        assert polls == ["Completed"]
    else:
        assert len(polls) >= 2 and polls[-1] == "Completed"
        assert set(polls[:-1]) <= {"Pending", "InProgress"}


def test_a_held_poll_answers_when_the_op_completes(tmp_path: Path, runtime: Any) -> None:
    """Submits answered at once; one poll, held (up to 30 s), comes back Completed as soon
    as the op finishes: well before the hold's end."""
    service = _stub_service(tmp_path)
    polls = _count_polls(service)
    try:
        with ServerThread(service, long_poll=30.0, submit_hold=0.0) as url:
            rt = runtime(url)
            op_id = rt.execute_training_operation(trainingSessionName="s1", **_fb(1))
            op = service.operation("s1", op_id["operationId"])
            assert op.status not in vocab.OP_TERMINAL  # the submit was not held
            answer = rt.get_training_operation_result(trainingSessionName="s1", operationId=op.id)
            returned = time.monotonic()
    finally:
        service.close()
    assert answer["status"] == "Completed" and polls == ["Completed"]
    assert op.finished_at is not None and returned - op.finished_at < 10.0  # not the 30 s hold


def test_a_submit_behind_a_sequence_gap_is_answered_at_once(tmp_path: Path, runtime: Any) -> None:
    """Op 2 cannot run before op 1 arrives, and a client may send 2 before 1 from one
    thread: holding 2's answer would stall that client until the gap timeout."""
    service = _stub_service(tmp_path, gap_timeout=60.0)
    try:
        with ServerThread(service, submit_hold=MAX_SUBMIT_HOLD_SECONDS) as url:
            rt = runtime(url)
            started = time.monotonic()
            second = rt.execute_training_operation(trainingSessionName="s1", **_fb(2))
            assert time.monotonic() - started < 2.0  # not held to the 3 s cap
            op2 = service.operation("s1", second["operationId"])
            assert op2.status not in vocab.OP_TERMINAL
            first = rt.execute_training_operation(trainingSessionName="s1", **_fb(1))
            op1 = service.operation("s1", first["operationId"])
            assert op1.status in vocab.OP_TERMINAL  # op 1 had nothing before it: held until done
            assert service.wait_operation("s1", op2.id, 30)
    finally:
        service.close()
    assert (op1.status, op2.status) == ("Completed", "Completed")


def test_at_most_a_few_sampling_submits_of_a_session_are_held(tmp_path: Path, runtime: Any) -> None:
    """Five concurrent sampling submits: MAX_HELD_SAMPLING answered only once their op is
    done, the rest at once (a held submit keeps one of the SDK's few submit threads)."""
    service = _stub_service(tmp_path)
    gate = threading.Barrier(5)
    try:
        with ServerThread(service, submit_hold=MAX_SUBMIT_HOLD_SECONDS) as url:
            rt = runtime(url)

            def submit(i: int) -> bool:
                gate.wait()
                answer = rt.execute_sampling_operation(
                    trainingSessionName="s1",
                    operationConfig={
                        "sample": {
                            "prompt": {
                                "chunks": [{"tokens": [257, i + 1], "type": "encoded_text"}]
                            },
                            "numSamples": 1,
                            "samplingParams": {"maxTokens": 512, "seed": i},
                        }
                    },
                )
                return service.operation("s1", answer["operationId"]).status in vocab.OP_TERMINAL

            with ThreadPoolExecutor(5) as pool:
                done_when_answered = list(pool.map(submit, range(5)))
    finally:
        service.close()
    assert sum(done_when_answered) == MAX_HELD_SAMPLING


def test_a_submit_queued_behind_a_running_op_is_answered_at_once(
    tmp_path: Path, runtime: Any
) -> None:
    """Op 1 runs (its submit held until it is done); op 2, sent meanwhile from another thread,
    is answered while op 1 still runs: a client's queued submits all reach the queue, so a
    stop() skips them instead of the SDK abandoning them (docs/wire.md#6)."""
    service = _stub_service(tmp_path)
    try:
        with ServerThread(service, submit_hold=MAX_SUBMIT_HOLD_SECONDS) as url:
            rt = runtime(url)
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(
                    rt.execute_training_operation, trainingSessionName="s1", **_fb(1)
                )
                session = service.session("s1")
                while session.running_op is None:
                    time.sleep(0.01)
                op1 = session.running_op
                second = rt.execute_training_operation(trainingSessionName="s1", **_fb(2))
                op1_when_2_answered = op1.status
                op2 = service.operation("s1", second["operationId"])
                op2_when_answered = op2.status
                first.result(30)
            op1_when_1_answered = op1.status
            assert service.wait_operation("s1", op2.id, 30)
    finally:
        service.close()
    assert op1_when_2_answered not in vocab.OP_TERMINAL
    assert op2_when_answered not in vocab.OP_TERMINAL
    assert op1_when_1_answered in vocab.OP_TERMINAL  # the head op's submit was held


@pytest.mark.parametrize("seconds", [-1.0, MAX_SUBMIT_HOLD_SECONDS + 0.5, 20.0])
def test_a_submit_hold_longer_than_the_sdks_close_wait_allows_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match=r"stop\(\) and delete\(\) wait 5 s"):
        check_submit_hold(seconds)
