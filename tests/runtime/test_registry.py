"""The package registry: versions, ARNs, and crash safety of writes (no torch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procio import Lines

from localsession.runtime.errors import ServiceError
from localsession.runtime.packages.registry import Registry, parse_arn

GROUP = "arn:aws:sagemaker:us-west-2:000000000000:model-package-group/crash-test"


def make(registry: Registry, write: object = None) -> str:
    def default_write(tmp: Path) -> None:
        (tmp / "adapter_model.safetensors").write_bytes(b"x" * 10)

    return registry.create(
        GROUP,
        kind="model",
        base_model="localsession/tiny",
        lora_rank=4,
        lora_alpha=8,
        description="d",
        session="s",
        merged=False,
        write=write or default_write,  # type: ignore[arg-type]
    ).arn


def test_versions_count_up_per_group(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    arns = [make(registry) for _ in range(3)]
    assert [parse_arn(a) for a in arns] == [("crash-test", 1), ("crash-test", 2), ("crash-test", 3)]
    assert arns[0] == "arn:aws:sagemaker:us-west-2:000000000000:model-package/crash-test/1"
    assert [p.version for p in Registry(tmp_path, "us-west-2", "000000000000").list(GROUP)] == [
        3,
        2,
        1,
    ]
    with pytest.raises(ServiceError, match="expected arn:aws:sagemaker"):
        registry.get("arn:aws:sagemaker:us-west-2:000000000000:model-package-group/crash-test")


def test_a_failed_write_leaves_nothing_visible(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "us-west-2", "000000000000")

    def half_then_fail(tmp: Path) -> None:
        (tmp / "adapter_model.safetensors").write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        make(registry, half_then_fail)
    assert registry.list(GROUP) == [] and list((tmp_path / "packages" / ".tmp").iterdir()) == []
    assert parse_arn(make(registry))[1] == 1


def test_a_killed_writer_leaves_no_package_and_no_corrupt_index(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from localsession.runtime.packages.registry import Registry\n"
        "r = Registry(Path(sys.argv[1]), 'us-west-2', '000000000000')\n"
        "def slow(tmp):\n"
        "    (tmp / 'adapter_model.safetensors').write_bytes(b'half')\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(30)\n"
        f"r.create({GROUP!r}, kind='checkpoint', base_model='m', lora_rank=1, lora_alpha=1,\n"
        "         description='', session='s', merged=False, write=slow)\n"
    )
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    make(registry)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE)
    assert Lines(proc.stdout, "the writer's stdout").readline().strip() == b"writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert [p.version for p in registry.list(GROUP)] == [1]
    reopened = Registry(tmp_path, "us-west-2", "000000000000")  # sweeps the interrupted write
    assert list((tmp_path / "packages" / ".tmp").iterdir()) == []
    assert [p.version for p in reopened.list(GROUP)] == [1]
    started = time.monotonic()
    assert parse_arn(make(reopened))[1] == 2 and time.monotonic() - started < 5


def test_opening_a_home_sweeps_only_writes_whose_process_is_gone(tmp_path: Path) -> None:
    """Two processes on one home: the second's registry must not delete the write the first
    has in progress in ``.tmp``; leftovers of dead writers (and unnamed ones) are swept."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    dead = int(done.stdout)
    tmp = tmp_path / "packages" / ".tmp"
    names = [
        f"{os.getpid()}-inflight",
        f"deleted-{os.getpid()}-x",
        f"{dead}-crashed",
        f"deleted-{dead}-x",
        "0123abcd",
    ]
    for name in names:
        (tmp / name).mkdir(parents=True)
    Registry(tmp_path, "us-west-2", "000000000000")
    assert sorted(p.name for p in tmp.iterdir()) == sorted(names[:2])
