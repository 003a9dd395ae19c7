"""Helpers to run the conformance suite in a subprocess (shared by this folder's tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance" / "suite"
BACKENDS = ("inprocess", "http", "fakes")
REFERENCE = ROOT / "conformance" / "reference"
#: The backend whose suite run (``suite_runs``) also checks the shipped reference snapshots,
#: so test_snapshots.py runs only the other two carriers itself.
SNAPSHOT_BACKEND = "http"
TIMEOUT = 600


def suite_command(backend: str, *extra: str, paths: Sequence[Path] = (SUITE,)) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-p", "conformance.plugin", f"--backend={backend}",
        "-p", "no:cacheprovider", "-q", *map(str, paths), *extra,
    ]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


@dataclass
class Finished:
    backend: str
    returncode: int
    output: str
    report: Path
    #: the ``--snapshot-report`` of the run that also checked the reference snapshots
    snapshots: Path | None = None
