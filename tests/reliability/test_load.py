"""Load: 8 sessions and 1,000 concurrent in-flight result polls against the server, and
bounded queues (ThrottlingException past the per-session limit, which the SDK retries).

The polls are made the way the SDK makes them: one thread per pending future, each calling
``GetTrainingOperationResult`` through one shared botocore runtime client. To be sure all
1,000 are in flight at once, every session's op 1 is held back (a sequence gap blocks the
session) until all pollers have sent their request; then op 1 goes in and everything runs.
Every result is checked against a forward computed independently on a fresh in-process
session.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config

from localsession.port import EngineSpec
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import ServiceConfig
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import build_service

from .conftest import create_session, run_op

SESSIONS, OPS_PER_SESSION = 8, 125
ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/load"


def _datum(variant: int) -> dict[str, Any]:
    tokens = [257, *f"load test {variant}".encode()]
    return {
        "modelInput": {"chunks": [{"tokens": tokens[:-1], "type": "encoded_text"}]},
        "lossFnInputs": {
            "target_tokens": {"data": tokens[1:], "dtype": "int64"},
            "weights": {"data": [1.0] * (len(tokens) - 1), "dtype": "float32"},
        },
    }


def _forward(variant: int) -> dict[str, Any]:
    return {"forward": {"lossFnName": "cross_entropy", "datumList": [_datum(variant)]}}


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture
def runtime_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``runtime_client(url)``: a botocore runtime client as the SDK builds it, pool 1,000."""

    def make(url: str) -> Any:
        for key, value in client_env(url, "us-west-2").items():
            monkeypatch.setenv(key, value)
        config = Config(
            max_pool_connections=1000,
            retries={"total_max_attempts": 1},
            read_timeout=60,
            connect_timeout=10,
        )
        return boto3.Session().client("sagemakertrainingsessionruntime", config=config)

    yield make


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_eight_sessions_and_a_thousand_polls_in_flight(tmp_path: Any, runtime_client: Any) -> None:
    service = build_service(ServiceConfig(home=tmp_path, max_sessions=SESSIONS, gap_timeout=120.0))
    # Independent expectations: each variant's forward on a fresh session, in-process.
    reference = create_session(service)
    expected = {
        v: run_op(service, reference, v + 1, _forward(v))["operationResult"]["forward"]
        for v in range(8)
    }
    service.stop_training_session({"TrainingSessionName": reference})
    service.delete_training_session({"TrainingSessionName": reference})

    with ServerThread(service, long_poll=15.0) as url:
        rt = runtime_client(url)
        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:  # engines load in parallel
            names = list(pool.map(lambda _: create_session(service), range(SESSIONS)))

        def submit_all(name: str) -> list[tuple[str, str, int]]:
            """Ops 2..126 of one session, queued behind its missing op 1."""
            return [
                (
                    name,
                    rt.execute_training_operation(
                        trainingSessionName=name,
                        sequenceNumber=seq,
                        clientToken=str(uuid.uuid4()),
                        operationConfig=_forward(seq % 8),
                    )["operationId"],
                    seq % 8,
                )
                for seq in range(2, OPS_PER_SESSION + 2)
            ]

        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
            ops = [op for batch in pool.map(submit_all, names) for op in batch]
        assert len(ops) == 1000

        in_flight = 0
        peak = 0
        lock = threading.Lock()
        rss_before = _rss_mb()

        def poll(name: str, op: str) -> dict[str, Any]:
            nonlocal in_flight, peak
            while True:
                with lock:
                    in_flight += 1
                    peak = max(peak, in_flight)
                try:
                    body = rt.get_training_operation_result(
                        trainingSessionName=name, operationId=op
                    )
                finally:
                    with lock:
                        in_flight -= 1
                if body["status"] not in ("Pending", "InProgress"):
                    return dict(body)

        with ThreadPoolExecutor(max_workers=1000) as pool:
            futures = [pool.submit(poll, name, op) for name, op, _ in ops]
            deadline = time.monotonic() + 60
            while peak < 1000 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # let the last requests reach the server's long-poll
            rss_held = _rss_mb()  # every poll held at once: the moment their memory peaks
            started = time.monotonic()
            for name in names:  # release every session
                rt.execute_training_operation(
                    trainingSessionName=name,
                    sequenceNumber=1,
                    clientToken=str(uuid.uuid4()),
                    operationConfig=_forward(0),
                )
            results = [f.result(timeout=300) for f in futures]
            elapsed = time.monotonic() - started

    assert peak == 1000, peak
    for (_, _, variant), body in zip(ops, results, strict=True):
        assert body["status"] == "Completed", body
        got, want = body["operationResult"]["forward"], expected[variant]
        assert got["lossFnOutputs"] == want["lossFnOutputs"]
        timed = {"mfu"}  # the one metric that times the op
        assert {k: v for k, v in got["metrics"].items() if k not in timed} == {
            k: v for k, v in want["metrics"].items() if k not in timed
        }
    for name in names:
        assert (
            service.describe_training_session({"TrainingSessionName": name})[
                "TrainingSessionDetail"
            ]["TrainingSessionStatus"]
            == "Running"
        )
    service.close()
    print(
        f"load: {SESSIONS} sessions, {peak} polls in flight at once, {len(ops)} ops in "
        f"{elapsed:.1f}s ({len(ops) / elapsed:.0f} ops/s); RSS {rss_before:.0f} MB before "
        f"the polls, {rss_held:.0f} MB with every poll held"
    )
    assert rss_held - rss_before < 1024  # a thousand held polls cost no unbounded memory


def test_queues_are_bounded_and_the_gap_filler_is_always_admitted(tmp_path: Any) -> None:
    service = build_service(ServiceConfig(home=tmp_path, max_queued_ops=4, gap_timeout=60.0))
    name = create_session(service)

    def submit(seq: int) -> str:
        return service.execute_training_operation(
            name,
            {"sequenceNumber": seq, "clientToken": f"q-{seq}", "operationConfig": _forward(seq)},
        )["operationId"]

    later = [submit(seq) for seq in range(2, 6)]  # four queued behind the missing op 1
    with pytest.raises(ServiceError) as throttled:
        submit(6)
    assert (throttled.value.code, throttled.value.http_status) == ("ThrottlingException", 429)
    assert "4 training operations queued" in throttled.value.message
    assert submit(2) == later[0]  # a retried, already accepted op is still answered
    first = submit(1)  # the number the session waits for is let in past the limit
    for op in [first, *later]:
        assert service.wait_operation(name, op, 60)
        assert service.get_training_operation_result(name, op)["status"] == "Completed"
    assert submit(6)  # drained: accepted again
    service.close()


def test_the_sdk_retries_throttled_submits(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for only 2 queued ops, an SDK loop that pipelines 16 ops still gets every
    result, in order and correct: each ThrottlingException was retried."""
    from sagemaker.train.training_session import Datum, ModelInput, ServiceClient

    def slow_engine(spec: EngineSpec) -> Any:
        """The real engine, with each op held 50 ms, so the SDK outpaces it and the queue
        fills (whatever the machine's speed)."""
        from localsession.engine import create_engine

        engine = create_engine(spec)
        forward_backward = engine.forward_backward

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.05)
            return forward_backward(*args, **kwargs)

        engine.forward_backward = slow  # type: ignore[method-assign]
        return engine

    service = build_service(
        ServiceConfig(home=tmp_path, max_queued_ops=2, gap_timeout=60.0, engine_factory=slow_engine)
    )
    reference = create_session(service)
    expected = [
        run_op(service, reference, v + 1, _forward(v))["operationResult"]["forward"]["metrics"][
            "loss"
        ]
        for v in range(8)
    ]
    service.stop_training_session({"TrainingSessionName": reference})
    throttles = 0
    original = service.execute_training_operation

    def counting(name: str, request: dict[str, Any]) -> dict[str, Any]:
        nonlocal throttles
        try:
            return original(name, request)
        except ServiceError as exc:
            throttles += exc.code == "ThrottlingException"
            raise

    service.execute_training_operation = counting  # type: ignore[method-assign]
    # Submits answered at once (no hold), so the SDK pipelines its 16 ops into the queue.
    with ServerThread(service, long_poll=5.0, submit_hold=0.0) as url:
        for key, value in client_env(url, "us-west-2").items():
            monkeypatch.setenv(key, value)
        client = ServiceClient(
            role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o"
        )
        tc = client.create_lora_training_client(base_model="localsession-tiny", rank=4, alpha=8)
        try:
            futures = []
            for i in range(16):
                d = _datum(i % 8)
                datum = Datum(
                    model_input=ModelInput.from_ints(d["modelInput"]["chunks"][0]["tokens"]),
                    loss_fn_inputs={
                        "target_tokens": d["lossFnInputs"]["target_tokens"]["data"],
                        "weights": d["lossFnInputs"]["weights"]["data"],
                    },
                )
                futures.append(tc.forward([datum], "cross_entropy"))
            losses = [f.result().metrics["loss"] for f in futures]
        finally:
            tc.stop()
    service.close()
    assert losses == pytest.approx([expected[i % 8] for i in range(16)], rel=1e-6)
    assert throttles > 0  # the limit was hit, and the SDK got through anyway
