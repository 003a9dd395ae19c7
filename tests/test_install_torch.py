"""``make``'s torch choice (localsession/install_torch.py): the CUDA build where an NVIDIA GPU
is present, else the CPU build, preferring a ``+cpu`` wheel pip's configured sources already
offer; detection through ``nvidia-smi -L`` and ``/proc/driver/nvidia/gpus``, faked here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from localsession import install_torch as it

SMI_LIST = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n"


def _runner(stdout: str = "", returncode: int = 0, raises: BaseException | None = None) -> Any:
    calls: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if raises is not None:
            raise raises
        return subprocess.CompletedProcess(command, returncode, stdout, "")

    run.calls = calls  # type: ignore[attr-defined]
    return run


@pytest.fixture
def no_proc(tmp_path: Path) -> Path:
    return tmp_path / "no-driver"


def test_a_gpu_listed_by_nvidia_smi_is_found(
    monkeypatch: pytest.MonkeyPatch, no_proc: Path
) -> None:
    monkeypatch.setattr(it.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    run = _runner(SMI_LIST)
    assert it.nvidia_gpu(run, no_proc) == "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"
    assert run.calls == [["/usr/bin/nvidia-smi", "-L"]]


@pytest.mark.parametrize(
    "run",
    [
        _runner("No devices were found\n", returncode=6),  # a driver, no device
        _runner("", returncode=0),
        _runner(raises=subprocess.TimeoutExpired("nvidia-smi", 30)),
        _runner(raises=OSError("exec format error")),
    ],
    ids=["no-devices", "empty", "hangs", "broken"],
)
def test_nvidia_smi_without_a_gpu_is_no_gpu(
    monkeypatch: pytest.MonkeyPatch, no_proc: Path, run: Any
) -> None:
    monkeypatch.setattr(it.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert it.nvidia_gpu(run, no_proc) is None


def test_the_drivers_proc_entry_counts_without_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(it.shutil, "which", lambda name: None)
    proc = tmp_path / "nvidia"
    (proc / "gpus").mkdir(parents=True)
    assert it.nvidia_gpu(_runner(), proc) is None  # a driver with no GPU entry
    (proc / "gpus" / "0000:01:00.0").mkdir()
    assert it.nvidia_gpu(_runner(), proc) == f"1 GPU(s) under {proc / 'gpus'}"


def test_configured_version_reads_pips_dry_run_report() -> None:
    report = {"install": [{"metadata": {"name": "torch", "version": "2.13.0+cpu"}}]}
    run = _runner(json.dumps(report))
    assert it.configured_version("/venv/bin/python", run) == "2.13.0+cpu"
    command = run.calls[0]
    assert command[:4] == ["/venv/bin/python", "-m", "pip", "install"]
    assert {"--dry-run", "--no-deps", "--report", "-", it.TORCH} <= set(command)
    assert it.configured_version("python", _runner("not json")) is None
    assert it.configured_version("python", _runner(returncode=1)) is None
    assert it.configured_version("python", _runner(json.dumps({"install": []}))) is None


def test_the_plan_for_each_machine() -> None:
    gpu_args, gpu_line = it.plan("GPU 0: NVIDIA A10G", "2.13.0+cpu", None)
    assert gpu_args == ["torch==2.13.0"] and "CUDA build" in gpu_line and "A10G" in gpu_line
    local_args, local_line = it.plan(None, "2.13.0+cpu", None)
    assert local_args == ["torch==2.13.0"]  # the wheel pip already sees: works offline
    assert "CPU build of torch, 2.13.0+cpu, from pip's configured sources" in local_line
    for configured in ("2.13.0", None):  # PyPI's (CUDA) build, or pip could not tell
        args, line = it.plan(None, configured, None)
        assert args == ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]
        assert line.startswith("no NVIDIA GPU: installing the CPU build")
    args, line = it.plan("GPU 0: x", None, "https://example.org/simple")
    assert args == ["torch==2.13.0", "--index-url", "https://example.org/simple"]
    assert "(TORCH_INDEX)" in line


@pytest.mark.parametrize(
    ("version", "build"),
    [
        ("2.13.0+cpu", "CPU build"),
        ("2.13.0+cu126", "CUDA build"),
        ("2.13.0+rocm6.4", "rocm6.4 build"),
    ],
)
def test_build_of_names_the_local_label(version: str, build: str) -> None:
    assert it.build_of(version) == build


def test_only_the_cpu_index_has_a_fallback() -> None:
    args, _ = it.plan(None, None, None)
    again = it.fallback(args)
    assert again is not None
    assert again[0] == ["torch==2.13.0"]  # pip's configured sources: no --index-url
    assert "TORCH_INDEX=URL" in again[1] and "CUDA build" in again[1]
    assert it.fallback(it.plan(None, "2.13.0+cpu", None)[0]) is None
    assert it.fallback(it.plan("GPU 0: x", None, None)[0]) is None
    assert it.fallback(it.plan(None, None, "https://example.org/simple")[0]) is None


@pytest.mark.parametrize("second_rc", [0, 1])
def test_an_unreachable_cpu_index_falls_back_to_pips_sources(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], second_rc: int
) -> None:
    installs: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if command[1:4] == ["-m", "pip", "install"]:
            installs.append(command[4:])
            rc = 1 if len(installs) == 1 else second_rc  # the CPU index: out of reach
            return subprocess.CompletedProcess(command, rc, "", "")
        return subprocess.CompletedProcess(command, 0, "2.13.0\n", "")  # the version check

    monkeypatch.setattr(it, "installed", lambda: None)
    monkeypatch.setattr(it, "nvidia_gpu", lambda: None)
    monkeypatch.setattr(it, "configured_version", lambda python: "2.13.0")
    monkeypatch.delenv("TORCH_INDEX", raising=False)
    monkeypatch.setattr(it.subprocess, "run", run)
    assert it.main() == second_rc
    assert installs == [[it.TORCH, "--index-url", it.CPU_INDEX], [it.TORCH]]
    out = capsys.readouterr().out
    assert "could not be used" in out
    assert ("installed torch 2.13.0 (CUDA build)" in out) == (second_rc == 0)
