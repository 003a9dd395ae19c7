"""Tinker sessions as the service keeps them, through the unmodified ``tinker`` SDK: one
hidden sampler per base model however many first requests arrive together, and a client
that goes away without ``close()`` has its sessions expired after the heartbeat timeout.

Nothing here times anything: the expiry test waits on a condition with a generous deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from procio import Lines, spawn
from testkit import running_server

tinker = pytest.importorskip("tinker")
types = tinker.types

RACE_MODEL = "race/hidden-sampler"


@pytest.mark.localsession_tinker(model_map={RACE_MODEL: "localsession/tiny"})
def test_sixteen_simultaneous_first_samples_make_one_hidden_sampler(
    localsession_tinker: Any,
) -> None:
    service = localsession_tinker.service
    before = {s.name for s in service.sessions()}
    sc = tinker.ServiceClient()
    samplers = [sc.create_sampling_client(base_model=RACE_MODEL).result() for _ in range(16)]
    gate = threading.Barrier(16)
    results: list[Any] = []
    failures: list[BaseException] = []

    def first_sample(sampler: Any) -> None:
        gate.wait()
        try:
            params = types.SamplingParams(max_tokens=2, seed=0)
            results.append(
                sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, params).result()
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=first_sample, args=(s,)) for s in samplers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    sc.close("success").result()
    assert not failures, failures
    assert len(results) == 16 and all(len(r.sequences[0].tokens) == 2 for r in results)
    made = [s for s in service.sessions() if s.name not in before]
    assert len(made) == 1, [(s.name, s.status) for s in made]


CLIENT = textwrap.dedent(
    """
    import os, sys
    import tinker
    from tinker import types

    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 3, 4]),
        loss_fn_inputs={"target_tokens": [2, 3, 4, 5], "weights": [1.0] * 4},
    )
    tc.forward_backward([datum], "cross_entropy").result()
    sampler = sc.create_sampling_client(base_model="localsession/tiny").result()
    params = types.SamplingParams(max_tokens=2, seed=0)
    sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, params).result()
    print("ready", flush=True)
    os._exit(0)  # gone without close(): no more heartbeats
    """
)


def test_a_client_that_exits_without_closing_leaves_no_running_session(tmp_path: Path) -> None:
    with running_server(
        tmp_path / "home", strict=False, max_sessions=8, heartbeat_timeout=2.0
    ) as served:
        env = {
            **os.environ,
            "TINKER_BASE_URL": served.url,
            "TINKER_API_KEY": "tml-localsession",
            "HF_HUB_CACHE": str(served.service.hub_cache),
            "HF_HUB_OFFLINE": "1",
        }
        done = subprocess.run(
            [sys.executable, "-c", CLIENT], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0 and "ready" in done.stdout, done.stderr[-3000:]
        names = {s.name for s in served.service.sessions()}
        assert len(names) == 2  # the model's session and the base model's hidden sampler
        deadline = time.monotonic() + 120
        running = names
        while running and time.monotonic() < deadline:
            running = {s.name for s in served.service.sessions() if s.status == "Running"}
            time.sleep(0.2)
        assert not running, [(s.name, s.status) for s in served.service.sessions()]


def test_serve_prints_the_heartbeat_timeout(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "localsession", "serve", "--port", "0", "--quiet"]
    args += ["--home", str(tmp_path), "--heartbeat-timeout", "7.5"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "env": env}
    with spawn(args, **popen) as proc:  # its process group is stopped however this ends
        lines, seen = Lines(proc.stdout, "serve's output"), ""
        while "heartbeat" not in seen:
            line = lines.readline()
            assert line, seen
            seen += line
        assert "without a heartbeat for 7.5 s is expired" in seen, seen
        proc.send_signal(signal.SIGINT)
        # Ctrl-C stops serve cleanly however soon after the banner it comes (one while the
        # app was still being built once ended it with a traceback and status 1); a busy box
        # is slow to stop
        assert proc.wait(timeout=600) == 0
