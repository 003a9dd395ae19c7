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


def test_serve_prints_exports_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "localsession", "serve", "--port", "0", "--home", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("localsession serving on http://127.0.0.1:"), first
        url = first.split()[3]
        exports = {}
        while len(exports) < 9:
            line = proc.stdout.readline()
            if line.startswith("export "):
                key, _, value = line[len("export ") :].strip().partition("=")
                exports[key] = value
        assert exports["SAGEMAKER_TRAINING_SESSION_ENDPOINT"] == url
        assert exports["SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT"] == url
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= set(exports)
        assert exports["AWS_ENDPOINT_URL_S3"] == url + "/s3"
        note = ""
        while "STS" not in note:  # the banner says to pass s3_output_path, and why
            note += proc.stdout.readline()
        assert "s3_output_path=" in note, note
        for _ in range(100):  # the socket is bound before the banner; uvicorn starts next
            try:
                with urllib.request.urlopen(url + "/_localsession/health", timeout=1) as response:
                    assert json.loads(response.read())["status"] == "ok"
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the server never answered /_localsession/health")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "localsession server stopped" in out
        assert "Traceback" not in out
        # One INFO line per request: method, operation, status, milliseconds.
        assert re.search(r"\d\d:\d\d:\d\d GET /_localsession/health 200 \d+\.\d ms\n", out), out
    finally:
        if proc.poll() is None:
            proc.kill()
