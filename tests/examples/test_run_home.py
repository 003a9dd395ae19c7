"""An example's per-run home (RUN_DIR/localsession-home, where its model packages go) is
deleted when the run ends, unless ``--keep-packages`` (issue 21, item 4). A real process exit,
so the atexit cleanup runs as it does for a user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import os, sys
from pathlib import Path
from examples.common import loop
args = loop.parse_args(None, steps=1, smoke_steps=1, argv=sys.argv[1:])
run_dir = loop.run_dir_for(args, "t")
home = Path(os.environ["LOCALSESSION_HOME"])
(home / "packages" / "g" / "1").mkdir(parents=True)
(home / "packages" / "g" / "1" / "package.json").write_text("{}")
print(home)
"""


@pytest.mark.parametrize("keep", [False, True])
def test_the_run_home_goes_at_exit_unless_kept(tmp_path: Path, keep: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCALSESSION_HOME"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    argv = ["--run-dir", str(tmp_path / "run")] + (["--keep-packages"] if keep else [])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    home = Path(done.stdout.strip())
    assert home == (tmp_path / "run" / "localsession-home").resolve()
    assert home.exists() is keep
    assert (tmp_path / "run").is_dir()  # metrics and summary stay either way
