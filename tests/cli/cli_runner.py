"""Run ``python -m localsession ...`` as a user would, over a home of the test's choosing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from procio import Lines

from conformance.backends import processes


def cli_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment a user's shell would give: no ``PYTHONUNBUFFERED``, so stdout to a pipe
    is block-buffered and whatever the CLI must show at once it has to flush itself."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONUNBUFFERED", None)
    env.pop("LOCALSESSION_MODEL_MAP", None)
    env.update(extra)
    if home is not None:
        env["LOCALSESSION_HOME"] = str(home)
    return env


def run_cli(
    *args: str, home: Path | None = None, timeout: float = 180, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localsession", *args],
        capture_output=True,
        text=True,
        env=cli_env(home, **extra),
        timeout=timeout,
    )


def one_error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The single stderr line of a refused start, checked for the CLI's error form."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"localsession {command}: error: "), lines[0]
    return lines[0]


class Serving:
    """A ``localsession serve --port 0`` subprocess, up once its banner and exports printed."""

    def __init__(self, home: Path, *args: str) -> None:
        # A process group of its own, stopped with it (conformance/backends/processes.py).
        self.proc = processes.start(
            [sys.executable, "-m", "localsession", "serve", "--port", "0", "--home", str(home)]
            + list(args),
            own_group=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        self.out = Lines(self.proc.stdout, "serve's stdout")
        self.err = Lines(self.proc.stderr, "serve's stderr")
        try:
            first = self.out.readline()
        except AssertionError:
            processes.stop(self.proc)
            raise
        if not first.startswith("localsession serving on "):
            processes.stop(self.proc)
            raise AssertionError(f"no banner: {first!r} {self.out.rest()!r} {self.err.rest()!r}")
        self.url = first.split()[3]
        self.env: dict[str, str] = {}
        while len(self.env) < 9:
            line = self.out.readline()
            assert line, f"serve's stdout ended before its exports: {self.err.rest()!r}"
            if line.startswith("export "):
                key, _, value = line[len("export ") :].strip().partition("=")
                self.env[key] = value

    def stop(self) -> tuple[str, str]:
        """Ctrl-C, then the rest of stdout and stderr."""
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)  # a graceful stop, on a loaded machine
        finally:
            processes.stop(self.proc)  # the group, and anything left in it
        return self.out.rest(30), self.err.rest(30)

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def control_plane(url: str, operation: str, body: dict[str, object]) -> dict[str, object]:
    """One json-1.1 control-plane call (``X-Amz-Target: SageMaker.<operation>``)."""
    import json
    import urllib.request

    request = urllib.request.Request(
        url + "/",
        data=json.dumps(body).encode(),
        headers={
            "X-Amz-Target": f"SageMaker.{operation}",
            "Content-Type": "application/x-amz-json-1.1",
        },
        method="POST",
    )
    # A hang detector: a describe waits behind a model load on a loaded machine.
    with urllib.request.urlopen(request, timeout=300) as response:
        return dict(json.loads(response.read()))


#: The role every test session names (the runtime checks its form, not the account).
ROLE = "arn:aws:iam::000000000000:role/localsession-tests"


def session_status(url: str, name: str) -> str:
    """A session's ``TrainingSessionStatus`` through DescribeTrainingSession."""
    detail = control_plane(url, "DescribeTrainingSession", {"TrainingSessionName": name})
    return str(detail["TrainingSessionDetail"]["TrainingSessionStatus"])  # type: ignore[index]


def running_session(url: str, name: str, *, timeout: float = 300) -> None:
    """Create a rank-4 session of ``localsession/tiny`` named ``name`` on the server at
    ``url`` and wait until it is Running (torch and the model load: slow on a busy machine);
    fails naming the last status if it is not Running within ``timeout`` s."""
    control_plane(
        url,
        "CreateTrainingSession",
        {
            "TrainingSessionName": name,
            "LoraConfig": {"Rank": 4, "Alpha": 8},
            "RoleArn": ROLE,
            "ModelConfig": {"BaseModelArn": "localsession/tiny"},
        },
    )
    deadline = time.monotonic() + timeout
    status = session_status(url, name)
    while status != "Running" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = session_status(url, name)
    assert status == "Running", f"session {name} is {status} after {timeout:g} s, not Running"
