"""Ctrl-C during an example ends it with one line, exit status 130, and the metrics of the
steps that finished kept in RUN_DIR/metrics.jsonl (issue 25, item 9). A real process and a
real SIGINT, as a user's terminal sends it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_ends_an_example_with_one_line_and_keeps_its_metrics(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCALSESSION_HOME"}
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "sft_chat.py"), "--steps", "400"]
        + ["--quiet", "--run-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        # as from a terminal: a suite started in the background by a non-interactive shell
        # hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        metrics = run / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 2):
            assert proc.poll() is None, proc.communicate(timeout=30)
            assert time.monotonic() < deadline, "no step finished within 300 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == f"interrupted: the finished steps' metrics are in {run}/metrics.jsonl"
    assert "interrupted" not in "\n".join(lines[:-1])
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) >= 2 and all("step" in s for s in steps)
