"""Crash safety: SIGKILL ``localsession serve`` at chosen points, restart it on the same home.

Crash points: mid-``save_state`` (engine files written into staging, no index, no rename),
mid-``forward_backward`` with ops queued behind it, and (slow) kills at random moments during
a stream of saves against the unmodified ``localsession serve``. After each restart:

- every package whose save completed is listed and loads, and no partial package is visible
  (staging is swept, every version directory has its index);
- the sessions that were running are ``Failed`` with ErrorDetails saying the server restarted;
- the real SDK resumes from the latest checkpoint with
  ``create_training_client_from_state_with_optimizer`` and lands exactly where the lost session
  was when it saved.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from procio import Lines

from localsession.server.endpoints import client_env

from .conftest import HUB_ARN

HARNESS = Path(__file__).with_name("crash_harness.py")
GROUP_NAME = "crashy"
GROUP = f"arn:aws:sagemaker:us-west-2:123456789012:model-package-group/{GROUP_NAME}"
ROLE = "arn:aws:iam::123456789012:role/R"
TEXT = [257, *b"crash, restart, resume"]
DATUM = {
    "modelInput": {"chunks": [{"tokens": TEXT[:-1], "type": "encoded_text"}]},
    "lossFnInputs": {
        "target_tokens": {"data": TEXT[1:], "dtype": "int64", "shape": [len(TEXT) - 1]},
        "weights": {"data": [1.0] * (len(TEXT) - 1), "dtype": "float32"},
    },
}
FB = {"forwardBackward": {"lossFnName": "cross_entropy", "datumList": [DATUM]}}
FWD = {"forward": {"lossFnName": "cross_entropy", "datumList": [DATUM]}}
STEP = {"optimizerStep": {"adamParamsConfig": {"learningRate": 0.01}}}
SAVE = {"saveState": {"description": "checkpoint"}}


@dataclass
class Server:
    """One ``localsession serve`` process and boto3 clients pointed at it."""

    proc: subprocess.Popen[str]
    url: str
    cp: Any
    rt: Any

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def create(self, name: str, rank: int = 4) -> None:
        self.cp.create_training_session(
            TrainingSessionName=name,
            ModelPackageGroupArn=GROUP,
            LoraConfig={"Rank": rank, "Alpha": 2 * rank},
            RoleArn=ROLE,
            ModelConfig={"BaseModelArn": HUB_ARN},
            OutputConfig={"S3Location": {"Path": "s3://bucket/out"}},
        )
        assert self.status(name) == "Running"  # Describe waits for the model to load

    def status(self, name: str) -> str:
        detail = self.cp.describe_training_session(TrainingSessionName=name)
        return str(detail["TrainingSessionDetail"]["TrainingSessionStatus"])

    def submit(self, name: str, seq: int, config: dict[str, Any]) -> str:
        response = self.rt.execute_training_operation(
            trainingSessionName=name,
            sequenceNumber=seq,
            clientToken=f"crash-{seq}-{uuid.uuid4().hex[:8]}",
            operationConfig=config,
        )
        return str(response["operationId"])

    def result(self, name: str, op: str) -> dict[str, Any]:
        while True:  # the server long-polls, so this loop turns rarely
            body = self.rt.get_training_operation_result(trainingSessionName=name, operationId=op)
            if body["status"] not in ("Pending", "InProgress"):
                return dict(body)

    def run(self, name: str, seq: int, config: dict[str, Any]) -> dict[str, Any]:
        body = self.result(name, self.submit(name, seq, config))
        assert body["status"] == "Completed", body
        return dict(body["operationResult"])

    def packages(self) -> list[str]:
        listed = self.cp.list_model_packages(ModelPackageGroupName=GROUP, MaxResults=100)
        return [p["ModelPackageArn"] for p in listed["ModelPackageSummaryList"]]


@pytest.fixture
def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``start(stall=None, harness=True)`` runs a server on ``tmp_path/home``."""
    home = tmp_path / "home"
    procs: list[subprocess.Popen[str]] = []

    def launch(stall: str | None = None, harness: bool = True) -> Server:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.pop("PYTHONUNBUFFERED", None)
        env.pop("LOCALSESSION_STALL", None)
        if stall:
            env["LOCALSESSION_STALL"] = stall
            env["LOCALSESSION_STALL_MARK"] = str(tmp_path / "stalled")
        entry = [str(HARNESS)] if harness else ["-m", "localsession"]
        proc = subprocess.Popen(
            [sys.executable, *entry, "serve", "--port", "0", "--home", str(home)]
            + ["--gap-timeout", "5", "--long-poll", "5"]
            # answered at once: each submit queued behind the stalled op would otherwise be
            # held its 20 s (docs/wire.md#6) before the test reaches the kill
            + ["--submit-hold", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        procs.append(proc)
        first = Lines(proc.stdout, "serve's stdout").readline()
        assert first.startswith("localsession serving on http://127.0.0.1:"), first
        url = first.split()[3]
        for key, value in client_env(url, "us-west-2").items():
            monkeypatch.setenv(key, value)
        config = Config(retries={"max_attempts": 10, "mode": "standard"}, read_timeout=60)
        session = boto3.Session()
        server = Server(
            proc,
            url,
            session.client("sagemaker", config=config),
            session.client("sagemakertrainingsessionruntime", config=config),
        )
        for _ in range(300):  # the socket is bound before the banner; uvicorn starts next
            try:
                server.cp.list_training_sessions()
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.05)
        return server

    launch.home = home  # type: ignore[attr-defined]
    launch.mark = tmp_path / "stalled"  # type: ignore[attr-defined]
    yield launch
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _wait_for(mark: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not mark.exists():
        assert time.monotonic() < deadline, "the server never reached the crash point"
        time.sleep(0.02)


def _staged(home: Path) -> list[Path]:
    """What staging holds; the registry makes ``.tmp`` on its first write, so a home that
    has not been written yet has none, and nothing staged."""
    staging = home / "packages" / ".tmp"
    return list(staging.iterdir()) if staging.is_dir() else []


def _check_registry_on_disk(home: Path, expected_versions: list[int]) -> None:
    """No partial package: staging is empty and every version directory is whole."""
    assert _staged(home) == []
    group = home / "packages" / GROUP_NAME
    found = group.iterdir() if group.is_dir() else iter(())
    versions = sorted(int(p.name) for p in found if p.name.isdigit())
    assert versions == expected_versions
    for version in versions:
        assert (group / str(version) / "package.json").is_file()


def _check_restarted(server: Server, names: list[str]) -> None:
    for name in names:
        detail = server.cp.describe_training_session(TrainingSessionName=name)
        detail = detail["TrainingSessionDetail"]
        assert detail["TrainingSessionStatus"] == "Failed", detail
        assert "server restarted" in detail["ErrorDetails"], detail
        with pytest.raises(ClientError) as refused:
            server.submit(name, 100, FWD)
        assert refused.value.response["Error"]["Code"] == "ConflictException"
    listed = {
        s["TrainingSessionArn"].rpartition("/")[2]: s["TrainingSessionStatus"]
        for s in server.cp.list_training_sessions()["TrainingSessionSummaries"]
    }
    assert all(listed[name] == "Failed" for name in names), listed


def _resume_with_sdk(arn: str, expected_loss: float) -> None:
    """The unmodified SDK resumes from ``arn`` and sees exactly the saved weights."""
    from sagemaker.train.training_session import AdamParams, Datum, ModelInput, ServiceClient

    client = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o")
    batch = [
        Datum(
            model_input=ModelInput.from_ints(TEXT[:-1]),
            loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
        )
    ]
    tc = client.create_training_client_from_state_with_optimizer(arn, rank=4, alpha=8)
    try:
        loss = tc.forward(batch, "cross_entropy").result().metrics["loss"]
        assert loss == pytest.approx(expected_loss, rel=1e-6, abs=1e-7)
        tc.forward_backward(batch, "cross_entropy").result()
        tc.optim_step(AdamParams(learning_rate=1e-2)).result()
        new = tc.save_state("after resume").result().model_package_arn
    finally:
        tc.stop()
    assert new and new != arn


def test_kill_mid_save_state_with_queued_ops(start: Any) -> None:
    server = start(stall="saveState:2")
    server.create("crash-a")
    server.create("crash-idle")
    server.run("crash-a", 1, FB)
    server.run("crash-a", 2, STEP)
    first = server.run("crash-a", 3, SAVE)["saveState"]["modelPackageArn"]
    saved_loss = server.run("crash-a", 4, FWD)["forward"]["metrics"]["loss"]
    for seq, config in enumerate((FB, STEP, SAVE, FB, STEP, SAVE), start=5):
        server.submit("crash-a", seq, config)  # the second save stalls; the rest queue
    _wait_for(start.mark)
    staged = _staged(start.home)
    assert len(staged) == 1 and any(staged[0].iterdir())  # a half-written package...
    assert not (staged[0] / "package.json").exists()  # ...without its index
    server.kill()

    restarted = start()
    assert restarted.packages() == [first]
    _check_registry_on_disk(start.home, [1])
    _check_restarted(restarted, ["crash-a", "crash-idle"])
    restarted.cp.describe_model_package(ModelPackageName=first)
    _resume_with_sdk(first, saved_loss)
    assert len(restarted.packages()) == 2  # versions continue after the crash
    restarted.cp.delete_training_session(TrainingSessionName="crash-idle")
    assert "crash-idle" not in {
        s["TrainingSessionArn"].rpartition("/")[2]
        for s in restarted.cp.list_training_sessions()["TrainingSessionSummaries"]
    }


@pytest.mark.slow
def test_kill_mid_forward_backward_with_queued_ops(start: Any) -> None:
    server = start(stall="forwardBackward:2")
    server.create("crash-b")
    server.run("crash-b", 1, FB)
    server.run("crash-b", 2, STEP)
    first = server.run("crash-b", 3, SAVE)["saveState"]["modelPackageArn"]
    saved_loss = server.run("crash-b", 4, FWD)["forward"]["metrics"]["loss"]
    ops = [server.submit("crash-b", seq, c) for seq, c in enumerate((FB, STEP, SAVE), start=5)]
    _wait_for(start.mark)
    assert server.rt.get_training_operation_result(
        trainingSessionName="crash-b", operationId=ops[-1]
    )["status"] in ("Pending", "InProgress")
    server.kill()

    restarted = start()
    assert restarted.packages() == [first]
    _check_registry_on_disk(start.home, [1])
    _check_restarted(restarted, ["crash-b"])
    _resume_with_sdk(first, saved_loss)


@pytest.mark.slow
def test_random_kills_during_saves_never_lose_or_tear_a_package(start: Any) -> None:
    """The real ``localsession serve``, killed at random moments while saving back to back."""
    rng = random.Random(1234)
    acknowledged: list[str] = []
    for round_ in range(4):
        server = start(harness=False)
        name = f"crash-r{round_}"
        server.create(name)
        # Everything acknowledged before is still there, whole and loadable.
        listed = server.packages()
        assert set(acknowledged) <= set(listed)
        _check_registry_on_disk(start.home, list(range(1, len(listed) + 1)))
        for seq, arn in enumerate(listed[:3], start=1):  # newest three load
            body = server.run(
                name, seq, {"loadState": {"modelPackageArn": arn, "loadOptimizer": True}}
            )
            assert body == {"loadState": {}}
        seq = 4
        ops = []
        for _ in range(40):
            ops.append(server.submit(name, seq, SAVE if seq % 2 else FB))
            seq += 1
        time.sleep(rng.uniform(0.05, 0.6))
        for op in ops:  # what completed before the kill must survive it
            body = server.rt.get_training_operation_result(trainingSessionName=name, operationId=op)
            if body["status"] == "Completed" and "saveState" in body["operationResult"]:
                acknowledged.append(body["operationResult"]["saveState"]["modelPackageArn"])
        server.kill()
    final = start(harness=False)
    print(f"random kills: 4 rounds, {len(acknowledged)} acknowledged saves, all listed")
    assert set(acknowledged) <= set(final.packages())
    _check_registry_on_disk(start.home, list(range(1, len(final.packages()) + 1)))
    _check_restarted(final, [f"crash-r{i}" for i in range(4)])
