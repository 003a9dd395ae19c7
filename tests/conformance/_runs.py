"""Helpers to run the conformance suite in a subprocess (shared by this folder's tests).

Every run is a process group of its own (procio.spawn), stopped with its group whatever
happens, so the ``localsession serve`` of ``--backend=http`` never outlives the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from procio import spawn

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance" / "suite"
BACKENDS = ("inprocess", "http", "fakes")
REFERENCE = ROOT / "conformance" / "reference"
#: The backend whose suite run (``suite_runs``) also checks the shipped reference snapshots,
#: so test_snapshots.py runs only the other two carriers itself.
SNAPSHOT_BACKEND = "http"
#: Seconds one suite run may take: a hang detector, not a speed check. One http run took
#: 14 min on 2 cores at load 9-12, and the folder runs up to three suites at once.
TIMEOUT = 3600


def suite_command(backend: str, *extra: str, paths: Sequence[Path] = (SUITE,)) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-p", "conformance.plugin", f"--backend={backend}",
        "-p", "no:cacheprovider", "-q", *map(str, paths), *extra,
    ]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(args: list[str], extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to the end (``extra``: variables over :func:`env`'s), in a process
    group of its own that is stopped, grandchildren too, however the wait ends."""
    with spawn(
        args, cwd=ROOT, env={**env(), **(extra or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        out, err = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@dataclass
class Finished:
    backend: str
    returncode: int
    output: str
    report: Path
    #: the ``--snapshot-report`` of the run that also checked the reference snapshots
    snapshots: Path | None = None
