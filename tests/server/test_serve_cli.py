"""``localsession serve`` as a user runs it: a subprocess on port 0, stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from procio import Lines


def test_serve_prints_exports_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONUNBUFFERED", None)  # as a user's shell: serve must flush its own banner
    proc = subprocess.Popen(
        [sys.executable, "-m", "localsession", "serve", "--port", "0", "--home", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        lines = Lines(proc.stdout, "serve's output")
        first = lines.readline()
        assert first.startswith("localsession serving on http://127.0.0.1:"), first
        url = first.split()[3]
        exports = {}
        while len(exports) < 9:
            line = lines.readline()
            if line.startswith("export "):
                key, _, value = line[len("export ") :].strip().partition("=")
                exports[key] = value
        assert exports["SAGEMAKER_TRAINING_SESSION_ENDPOINT"] == url
        assert exports["SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT"] == url
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= set(exports)
        assert exports["AWS_ENDPOINT_URL_S3"] == url + "/s3"
        note = ""
        while "STS" not in note:  # the banner says to pass s3_output_path, and why
            note += lines.readline()
        assert "s3_output_path=" in note, note
        # The socket is bound before the banner; uvicorn starts next (seconds on a loaded
        # machine: the bound is a hang detector).
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(url + "/_localsession/health", timeout=30) as response:
                    assert json.loads(response.read())["status"] == "ok"
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the server never answered /_localsession/health")
                time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        out = lines.rest(30)
        assert proc.returncode == 0, out
        assert "localsession server stopped" in out
        assert "Traceback" not in out
        # One INFO line per request: method, operation, status, milliseconds.
        assert re.search(r"\d\d:\d\d:\d\d GET /_localsession/health 200 \d+\.\d ms\n", out), out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_with_stdout_in_a_file_writes_its_banner_at_once(tmp_path: Path) -> None:
    """``localsession serve > serve.log &``: the URL and the exports are in the file while the
    server runs (Python block-buffers stdout that is not a terminal unless it is flushed)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONUNBUFFERED", None)
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "localsession", "serve", "--port", "0", "--quiet"]
            + ["--home", str(tmp_path / "home")],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    try:
        deadline = time.monotonic() + 120  # start-up on a loaded machine; typically ~2 s
        text = ""
        while text.count("\nexport ") < 9 and proc.poll() is None:
            assert time.monotonic() < deadline, f"no banner in the file after 120 s: {text!r}"
            time.sleep(0.1)
            text = log.read_text()
        assert proc.poll() is None, f"serve exited ({proc.returncode}): {text!r}"
        assert text.startswith("localsession serving on http://127.0.0.1:"), text
        url = text.split()[3]
        assert f"export SAGEMAKER_TRAINING_SESSION_ENDPOINT={url}\n" in text
        assert f"export AWS_ENDPOINT_URL_S3={url}/s3\n" in text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_serve_started_ignoring_sigint_still_stops_on_it_from_the_banner_on(
    tmp_path: Path,
) -> None:
    """A shell script's ``localsession serve &`` inherits SIGINT ignored; uvicorn takes it
    once it serves, and serve takes it before that too: one SIGINT right after the banner's
    first line (before uvicorn runs) stops it cleanly rather than being lost."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "localsession", "serve", "--port", "0", "--quiet"]
        + ["--home", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        lines = Lines(proc.stdout, "serve's output")
        assert lines.readline().startswith("localsession serving on ")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # a graceful stop on a loaded machine; lost, it never ends
        out = lines.rest(30)
        assert proc.returncode == 0, out
        assert "localsession server stopped" in out and "Traceback" not in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
