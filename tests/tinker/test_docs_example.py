"""docs/tinker.md's first example runs as printed against a loopback server, through the
unmodified SDK, with no SDK deprecation warning: its loss falls over the ten steps it prints.
"""

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


def _first_example() -> str:
    found = re.search(r"^```python\n(import tinker\n.*?)^```$", DOC.read_text(), re.M | re.S)
    assert found, "docs/tinker.md opens with a python example that imports tinker"
    return found.group(1)


@pytest.mark.localsession_tinker(engine="torch")
def test_the_first_example_runs_without_deprecation_warnings(
    localsession_tinker: Any, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(_first_example())
    env = {**os.environ, **localsession_tinker.environment()}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    warned = re.findall(r".*(?:DeprecationWarning|FutureWarning).*", done.stderr)
    assert not warned, warned
    losses = [float(m[2]) for m in re.finditer(r"^(\d) ([\d.]+)$", done.stdout, re.M)]
    assert len(losses) == 10 and losses[-1] < losses[0], done.stdout
    assert "SampleResponse(" in done.stdout
