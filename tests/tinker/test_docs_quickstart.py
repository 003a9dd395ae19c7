"""docs/tinker.md's quick-start block, run as a user runs it (a script with the server's
exports in its environment): it exits 0 and writes no warning on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")

DOC = Path(__file__).resolve().parents[2] / "docs" / "tinker.md"
WARNING_RE = re.compile(r"^.*(?:\b[A-Z]\w*Warning\b|\bWARNING\b).*$", re.M)


def _quickstart() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.M | re.S)
    first = next(b for b in blocks if b.startswith("import tinker"))
    assert "create_lora_training_client" in first and "sample(" in first
    return first


@pytest.mark.integration
def test_the_quickstart_block_runs_without_a_warning(localsession_tinker: Any) -> None:
    env = {**os.environ, **localsession_tinker.environment()}
    done = subprocess.run(
        [sys.executable, "-c", _quickstart()], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    assert not WARNING_RE.findall(done.stderr), done.stderr
    losses = [float(line.split()[1]) for line in done.stdout.splitlines()[:10]]
    assert len(losses) == 10 and losses[-1] < losses[0]  # it trains
    assert "SampleResponse(" in done.stdout
