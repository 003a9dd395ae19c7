"""Pieces of ``run_peers.py``: the box's load sampled while a run lasts, waiting on the
suite while watching the server, merging the reports of a resumed run, the installed
version of a peer's distribution, and starting Ray for TuFT on a busy box."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any


class LoadSampler:
    """The 1-minute load average, sampled every ``period`` seconds while a run lasts."""

    def __init__(self, period: float = 15.0) -> None:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period: float) -> None:
        while True:
            self.samples.append(round(os.getloadavg()[0], 2))
            if self.stop.wait(period):
                return

    def __enter__(self) -> LoadSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict[str, float]:
        values = self.samples or [os.getloadavg()[0]]
        return {"min": min(values), "mean": round(sum(values) / len(values), 2),
                "max": max(values)}  # fmt: skip


def watch(suite: subprocess.Popen[bytes], server: subprocess.Popen[bytes]) -> int:
    """Wait for the suite; should the server exit first, interrupt the suite (SIGINT: its
    report of the tests run so far is still written) rather than let every later test fail
    on a refused connection. Returns the suite's status."""
    while suite.poll() is None:
        if server.poll() is not None:
            suite.send_signal(signal.SIGINT)
            try:
                return suite.wait(timeout=120)
            except subprocess.TimeoutExpired:
                suite.kill()
        time.sleep(2)
    return suite.returncode


def merge(into: dict[str, Any] | None, part: dict[str, Any]) -> dict[str, Any]:
    """Two conformance reports of one suite's disjoint tests as one."""
    if into is None:
        return part
    tests = sorted([*into["tests"], *part["tests"]], key=lambda t: str(t["id"]))
    summary = {k: into["summary"].get(k, 0) + part["summary"].get(k, 0) for k in into["summary"]}
    return {**into, "tests": tests, "summary": summary}


def version(python: Path, distribution: str) -> str:
    """The installed version of ``distribution`` in ``python``'s environment."""
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    shown = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return shown.stdout.strip() or "unknown"


def start_ray(ray: Path, venv_dir: Path, log: Path, env: dict[str, str]) -> None:
    """``ray start`` for TuFT: one logical GPU, two CPUs, a 300 MB object store (Ray's
    default is 30% of the RAM), no dashboard. Ray gives its raylet 30 s to register and the
    raylet gives its agents 15 s: a busy box, or a run under ``nice``, misses both ("The
    current node timed out during startup"). So the start runs at normal priority (where
    this process may lower its niceness), with a longer agent timeout and up to three
    tries; Ray's processes are then set back to this process's niceness."""
    args = [str(ray), "start", "--head", "--num-gpus=1", "--num-cpus=2",
            f"--object-store-memory={300 * 2**20}", "--include-dashboard=false",
            "--disable-usage-stats"]  # fmt: skip
    own = os.getpriority(os.PRIO_PROCESS, 0)
    env = {**env, "RAY_agent_register_timeout_ms": "120000", "RAY_raylet_start_wait_time_s": "120"}
    for attempt in (1, 2, 3):
        with log.open("a") as out:
            out.write(f"$ {' '.join(args)}\n")
            out.flush()
            done = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  preexec_fn=_normal_priority, check=False)  # fmt: skip
        if done.returncode == 0:
            break
        subprocess.run([str(ray), "stop", "--force"], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        if attempt == 3:
            raise RuntimeError(f"ray start failed three times (see {log})")
    for proc in Path("/proc").iterdir():  # Ray's daemons: every process of TuFT's venv
        try:
            if proc.name.isdigit() and str(venv_dir) in (proc / "cmdline").read_text():
                os.setpriority(os.PRIO_PROCESS, int(proc.name), own)
        except OSError:
            pass


def _normal_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        pass  # not allowed here: Ray starts at this process's niceness
