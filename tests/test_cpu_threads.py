"""Idle runtime threads hold no OpenMP worker threads (localsession/cpu_threads.py).

OpenMP workers are OS threads that Python does not know, so they show up as the ids in
``/proc/self/task`` that no ``threading`` thread has. Each test that counts them first runs a
parallel kernel on the main thread, so that the main thread's own team exists beforehand.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from localsession import cpu_threads
from localsession.runtime.service import ServiceConfig
from localsession.types import ModelInput, SamplingParams
from localsession.wiring import build_service

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts threads through /proc")
ROLE = "arn:aws:iam::000000000000:role/localsession-tests"


@pytest.fixture(autouse=True)
def two_threads() -> Iterator[None]:
    """torch on two threads, so that a team has a worker (the suite runs torch on one:
    tests/engine/conftest.py); the main thread's team is handed back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
    cpu_threads.release()


def foreign_threads(settle: float = 0.1) -> set[int]:
    """Ids of the live OS threads that are not Python threads (OpenMP workers among them),
    as two reads ``settle`` seconds apart agree: a Python thread that is starting or ending
    is for a moment an OS thread that ``threading`` does not list, and a snapshot that
    caught one would count it as a worker (a CI run once failed so, in the full suite)."""

    def read() -> set[int]:
        python = {t.native_id for t in threading.enumerate()}
        return {int(tid) for tid in os.listdir("/proc/self/task")} - python

    first = read()
    time.sleep(settle)
    return first & read()


def parallel_kernel() -> None:
    """A kernel big enough for torch to split it across its OpenMP team."""
    values = torch.rand(1 << 22)
    values.exp_()


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Whether ``condition()`` holds within ``timeout`` seconds (polled every 50 ms)."""
    for _ in range(int(timeout / 0.05)):
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_linux_torch_has_a_pause_to_call() -> None:
    assert cpu_threads._find_pause() is not None


def test_release_frees_the_calling_threads_team_only() -> None:
    parallel_kernel()
    before = foreign_threads()
    team: set[int] = set()
    gone: list[bool] = []
    go_on = threading.Event()

    def worker() -> None:
        parallel_kernel()
        team.update(foreign_threads() - before)
        cpu_threads.release()
        # the freed workers end on their own, a moment after the release returns
        gone.append(wait_for(lambda: foreign_threads() <= before))
        go_on.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert wait_for(lambda: bool(gone))
        # the team: torch's thread count less the thread that leads it
        assert len(team) == torch.get_num_threads() - 1
        assert gone == [True]
        assert before <= foreign_threads()  # the main thread's team is still there
    finally:
        go_on.set()
        thread.join()


def test_a_thread_builds_its_team_again_at_its_next_kernel() -> None:
    parallel_kernel()
    before = foreign_threads()
    team = torch.get_num_threads() - 1
    steps: list[bool] = []

    def extra(count: int) -> bool:
        return wait_for(lambda: len(foreign_threads() - before) == count)

    def worker() -> None:
        cpu_threads.release()  # no team yet: nothing to free
        steps.append(extra(0))
        for _ in range(2):
            parallel_kernel()
            steps.append(len(foreign_threads() - before) == team)
            cpu_threads.release()
            steps.append(extra(0))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert steps == [True] * 5


#: Set in the fresh interpreter that runs a test counting every thread of the process.
ALONE = "CPU_THREADS_TEST_ALONE"


def test_idle_runtime_threads_and_waiting_callers_hold_no_openmp_threads(
    tmp_path: Path,
) -> None:
    """Counts every OS thread of the process over a session's life, so it runs in a fresh
    interpreter: in the full suite a thread left by an earlier test (a service or client
    still retrying) appeared during it and stayed, failing it twice in CI."""
    if os.environ.get(ALONE) != "1":
        test = f"{__file__}::test_idle_runtime_threads_and_waiting_callers_hold_no_openmp_threads"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
        run = subprocess.run(
            command, env={**os.environ, ALONE: "1"}, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-4000:] + run.stderr
        return
    from localsession import ServiceClient

    parallel_kernel()
    team = torch.get_num_threads() - 1
    service = build_service(ServiceConfig(home=tmp_path, max_sessions=2))
    try:
        client = ServiceClient(role_arn=ROLE, backend=service, strict=False)
        # a first session imports what loading needs (scipy's BLAS starts threads of its own)
        client.create_lora_training_client("localsession/tiny", rank=4).stop()
        before = foreign_threads()
        tc = client.create_lora_training_client("localsession/tiny", rank=4)
        sampler = tc.save_weights_and_get_sampling_client()
        # the worker loaded the model on its own thread: idle again, it holds no team
        assert wait_for(lambda: foreign_threads() <= before), foreign_threads() - before

        parallel_kernel()  # the main thread's team, (re)built
        mine = foreign_threads()
        params = SamplingParams(max_tokens=16, seed=1)
        sampler.sample(ModelInput.from_ints([257, 72, 105]), 2, params).result()
        # waiting on the sampler, the main thread gave its team back
        assert wait_for(lambda: len(mine - foreign_threads()) == team)

        async def awaits() -> None:
            await sampler.sample(ModelInput.from_ints([257, 72, 105]), 2, params)

        parallel_kernel()
        mine = foreign_threads()
        asyncio.run(awaits())
        # so does an event loop's thread, awaiting it
        assert wait_for(lambda: len(mine - foreign_threads()) == team)
        # and the sampler, idle again, holds none either
        assert wait_for(lambda: foreign_threads() <= before), foreign_threads() - before
        tc.stop()
    finally:
        service.close()
