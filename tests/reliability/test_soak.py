"""A bounded soak (slow): the whole session lifecycle over the wire, again and again, for a few
minutes; memory, threads and open file handles must not grow.

Each round: create a session, train (forward_backward + optim_step), save a checkpoint and
sampler weights, sample and compute logprobs from them, load the checkpoint back, stop and
delete the session, and delete the packages. The first rounds warm everything up; the numbers
after them are the baseline. ``LOCALSESSION_SOAK_SECONDS`` sets the length (default 180).
"""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from localsession.runtime.service import ServiceConfig
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import build_service

from .conftest import HUB_ARN

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/soak"
TEXT = [257, *b"soak it up"]
DATUM = {
    "modelInput": {"chunks": [{"tokens": TEXT[:-1], "type": "encoded_text"}]},
    "lossFnInputs": {
        "target_tokens": {"data": TEXT[1:], "dtype": "int64"},
        "weights": {"data": [1.0] * (len(TEXT) - 1), "dtype": "float32"},
    },
}


def _usage() -> tuple[float, int, int]:
    """(RSS in MB, live threads, open file descriptors) of this process."""
    gc.collect()
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    return rss, threading.active_count(), len(os.listdir("/proc/self/fd"))


def _round(cp: Any, rt: Any, index: int) -> None:
    name = f"soak-{index}-{uuid.uuid4().hex[:6]}"
    cp.create_training_session(
        TrainingSessionName=name,
        ModelPackageGroupArn=GROUP,
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=ROLE,
        ModelConfig={"BaseModelArn": HUB_ARN},
        OutputConfig={"S3Location": {"Path": "s3://bucket/out"}},
    )
    detail = cp.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running"

    def run(seq: int, config: dict[str, Any]) -> dict[str, Any]:
        op = rt.execute_training_operation(
            trainingSessionName=name,
            sequenceNumber=seq,
            clientToken=uuid.uuid4().hex,
            operationConfig=config,
        )["operationId"]
        while True:
            body = rt.get_training_operation_result(trainingSessionName=name, operationId=op)
            if body["status"] not in ("Pending", "InProgress"):
                assert body["status"] == "Completed", body
                return dict(body["operationResult"])

    seq = 0
    for _ in range(4):
        seq += 1
        run(seq, {"forwardBackward": {"lossFnName": "cross_entropy", "datumList": [DATUM]}})
        seq += 1
        run(seq, {"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-3}}})
    seq += 1
    state = run(seq, {"saveState": {}})["saveState"]["modelPackageArn"]
    seq += 1
    weights = run(seq, {"saveWeights": {}})["saveWeights"]["modelPackageArn"]

    def sample(config: dict[str, Any]) -> dict[str, Any]:
        op = rt.execute_sampling_operation(trainingSessionName=name, operationConfig=config)[
            "operationId"
        ]
        while True:
            body = rt.get_sampling_operation_result(trainingSessionName=name, operationId=op)
            if body["status"] not in ("Pending", "InProgress"):
                assert body["status"] == "Completed", body
                return dict(body["operationResult"])

    prompt = {"chunks": [{"tokens": TEXT[:4], "type": "encoded_text"}]}
    out = sample(
        {
            "sample": {
                "prompt": prompt,
                "numSamples": 2,
                "samplingParams": {"maxTokens": 16, "seed": index},
                "modelPackageArn": weights,
            }
        }
    )
    assert len(out["sample"]["sequences"]) == 2
    sample({"computeLogprobs": {"prompt": prompt, "modelPackageArn": weights}})
    seq += 1
    run(seq, {"loadState": {"modelPackageArn": state, "loadOptimizer": True}})
    cp.stop_training_session(TrainingSessionName=name)
    cp.delete_training_session(TrainingSessionName=name)
    for arn in (state, weights):
        cp.delete_model_package(ModelPackageName=arn)


@pytest.mark.slow
def test_soak_leaks_no_memory_threads_or_file_handles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds = float(os.environ.get("LOCALSESSION_SOAK_SECONDS", "180"))
    service = build_service(
        ServiceConfig(home=tmp_path, strict=False, persist_sessions=True, max_sessions=2)
    )
    with ServerThread(service, long_poll=5.0) as url:
        for key, value in client_env(url, "us-west-2").items():
            monkeypatch.setenv(key, value)
        config = Config(retries={"max_attempts": 3, "mode": "standard"})
        session = boto3.Session()
        cp = session.client("sagemaker", config=config)
        # The server runs relaxed (short generations); botocore would refuse maxTokens < 512.
        rt = session.client(
            "sagemakertrainingsessionruntime",
            config=config.merge(Config(parameter_validation=False)),
        )
        for index in range(3):  # warm-up: imports, caches, thread pools
            _round(cp, rt, index)
        time.sleep(1.0)
        baseline = _usage()
        samples = [baseline]
        rounds = 3
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            _round(cp, rt, rounds)
            rounds += 1
            if rounds % 5 == 0:
                samples.append(_usage())
        time.sleep(1.0)  # let stopped sessions' workers finish
        final = _usage()
    service.close()
    print(
        f"soak: {rounds} rounds in {seconds:.0f}s; RSS {baseline[0]:.0f} -> {final[0]:.0f} MB "
        f"(max {max(s[0] for s in samples):.0f}), threads {baseline[1]} -> {final[1]}, "
        f"fds {baseline[2]} -> {final[2]}"
    )
    assert rounds >= 10
    assert final[0] - baseline[0] < 150, (baseline, final)
    assert final[1] <= baseline[1] + 2, (baseline, final)
    assert final[2] <= baseline[2] + 5, (baseline, final)
    assert not list((tmp_path / "sessions").glob("*.json"))  # deleted sessions leave no record
