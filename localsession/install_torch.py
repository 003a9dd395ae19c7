"""Install torch for ``make``: keep one already installed; else the CUDA build where an NVIDIA
GPU is present and the CPU build elsewhere; say which, and why.

Run by the Makefile with the virtualenv's interpreter before localsession itself is installed,
so it imports nothing but the standard library; it is run by path with ``runpy`` (as a script,
its folder would come first on ``sys.path`` and ``localsession/types.py`` would shadow the
standard library's ``types``).

- **An NVIDIA GPU** is one that ``nvidia-smi -L`` lists, or a GPU entry under
  ``/proc/driver/nvidia/gpus`` (a loaded driver without ``nvidia-smi`` on the PATH). Then
  ``torch==2.13.0`` comes from PyPI, which on Linux is the CUDA build (~2.8 GB of downloads).
- **No GPU: the CPU build** (~0.2 GB), from PyTorch's CPU index, unless pip's configured
  sources (its index, ``find-links``, a local wheelhouse) already offer a ``+cpu`` build of
  that version: then that one, which also works offline. pip is asked without installing
  (``pip install --dry-run --report``).
- **That index out of reach** (pip fails against it: no network to it, a proxy that only
  lets a PyPI mirror through): ``torch==2.13.0`` from pip's configured sources instead, which
  on Linux is PyPI's CUDA build (it runs on a CPU too); the line says so, and how to avoid it.
- ``TORCH_INDEX=URL`` (the Makefile variable) installs from that index instead, whatever the
  machine has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

TORCH = "torch==2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NVIDIA_PROC = Path("/proc/driver/nvidia")

Runner = Callable[..., Any]  # subprocess.run's shape


def nvidia_gpu(run: Runner = subprocess.run, proc: Path = NVIDIA_PROC) -> str | None:
    """What names the NVIDIA GPU found (``nvidia-smi -L``'s first line, or the driver's
    entry), or None where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            listed = run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            listed = None
        if listed is not None and listed.returncode == 0:
            gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
            if gpus:
                return gpus[0].strip()
    gpus_dir = proc / "gpus"
    try:
        entries = sorted(gpus_dir.iterdir()) if gpus_dir.is_dir() else []
    except OSError:
        entries = []
    if entries:
        return f"{len(entries)} GPU(s) under {gpus_dir}"
    return None


def configured_version(python: str, run: Runner = subprocess.run) -> str | None:
    """The torch version pip would install for ``TORCH`` from its configured sources, asked
    with a dry run; None if pip cannot tell (no source has it, or it failed)."""
    command = [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet"]
    command += ["--report", "-", TORCH]
    try:
        done = run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        report = json.loads(done.stdout)
        return str(report["install"][0]["metadata"]["version"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def plan(gpu: str | None, configured: str | None, index: str | None) -> tuple[list[str], str]:
    """The ``pip install`` arguments and the line that says what is installed, and why."""
    if index:
        return [TORCH, "--index-url", index], f"installing {TORCH} from {index} (TORCH_INDEX)"
    if gpu is not None:
        return [TORCH], (
            f"NVIDIA GPU found ({gpu}): installing the CUDA build of {TORCH} from PyPI "
            "(~2.8 GB of downloads)"
        )
    if configured is not None and configured.endswith("+cpu"):
        return [TORCH], (
            f"no NVIDIA GPU: installing the CPU build of torch, {configured}, from pip's "
            "configured sources"
        )
    return [TORCH, "--index-url", CPU_INDEX], (
        f"no NVIDIA GPU: installing the CPU build of {TORCH} from {CPU_INDEX} (~0.2 GB)"
    )


def fallback(args: list[str]) -> tuple[list[str], str] | None:
    """What to install when ``pip install *args`` failed: pip's configured sources where
    ``args`` named PyTorch's CPU index; None where there is nothing else to try."""
    if CPU_INDEX not in args:
        return None
    return [TORCH], (
        f"{CPU_INDEX} could not be used (pip's error above); installing {TORCH} from pip's "
        "configured sources instead, on Linux the CUDA build (~2.8 GB of downloads; it runs "
        "on a CPU too). To get the CPU build, give an index that has it: TORCH_INDEX=URL, or "
        "a +cpu wheel in pip's find-links"
    )


def build_of(version: str) -> str:
    """``"CPU build"``, ``"CUDA build"`` or a build named by its local version label."""
    label = version.partition("+")[2]
    if label == "cpu":
        return "CPU build"
    if not label or label.startswith("cu"):
        return "CUDA build" if sys.platform == "linux" else "default build"
    return f"{label} build"


def installed() -> str | None:
    """The installed torch's version (read from its metadata: torch is not imported)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def main() -> int:
    present = installed()
    if present is not None:
        print(f"torch: keeping the installed torch {present} ({build_of(present)})", flush=True)
        return 0
    index = os.environ.get("TORCH_INDEX") or None
    gpu = nvidia_gpu()
    configured = None if index or gpu else configured_version(sys.executable)
    args, line = plan(gpu, configured, index)
    print(f"torch: {line}", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", *args])
    second = fallback(args) if done.returncode != 0 else None
    if second is not None:
        print(f"torch: {second[1]}", flush=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", *second[0]])
    if done.returncode != 0:
        return done.returncode
    after = subprocess.run(  # a fresh interpreter: this one's metadata view predates pip's
        [sys.executable, "-c", "from importlib.metadata import version; print(version('torch'))"],
        capture_output=True,
        text=True,
    )
    version = after.stdout.strip() or "?"
    print(f"torch: installed torch {version} ({build_of(version)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
