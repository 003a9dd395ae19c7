"""``localsession packages``: prune keeps exactly what it promises (a dry run unless --yes),
and the read-only commands create nothing in an empty home (issue 21, item 4)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from localsession.runtime.packages.registry import CHECKPOINT, MODEL, Registry

from .cli_runner import one_error_line, run_cli

REGION, ACCOUNT = "us-west-2", "000000000000"


def _fill(home: Path) -> dict[str, Path]:
    """Real packages on disk: run-a v1..v5 (v1-v3 ten days old), run-b v1..v2; kinds alternate
    checkpoint/model by version. Returns {"group/version": directory}."""
    registry = Registry(home, REGION, ACCOUNT)
    made: dict[str, Path] = {}
    for group, count in (("run-a", 5), ("run-b", 2)):
        for version in range(1, count + 1):
            info = registry.create(
                group,
                kind=CHECKPOINT if version % 2 else MODEL,
                base_model="localsession/tiny",
                lora_rank=4,
                lora_alpha=8,
                description="",
                session="s",
                merged=False,
                write=lambda d: (d / "adapter_model.safetensors").write_bytes(b"\0" * 1000),
            )
            made[f"{group}/{info.version}"] = registry.path(info.arn)
    old = (datetime.now(timezone.utc) - timedelta(days=10)).isoformat()
    for version in (1, 2, 3):
        index = made[f"run-a/{version}"] / "package.json"
        entry = json.loads(index.read_text())
        index.write_text(json.dumps({**entry, "creation_time": old}))
    return made


def _left(home: Path) -> set[str]:
    registry = Registry(home, REGION, ACCOUNT)
    return {f"{p.group}/{p.version}" for g in registry.groups() for p in registry.list(g)}


def _tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")}


ALL = {"run-a/1", "run-a/2", "run-a/3", "run-a/4", "run-a/5", "run-b/1", "run-b/2"}


@pytest.mark.parametrize(
    ("args", "deleted"),
    [
        (["--keep-latest", "2"], {"run-a/1", "run-a/2", "run-a/3"}),
        (["--keep-latest", "0", "--group", "run-b"], {"run-b/1", "run-b/2"}),
        (["--older-than", "7d"], {"run-a/1", "run-a/2", "run-a/3"}),
        (["--older-than", "7d", "--keep-latest", "4"], {"run-a/1"}),
        (["--older-than", "11d"], set()),
        # Kind filter: the newest checkpoint of each group stays (run-a/5, run-b/1).
        (["--kind", "checkpoint", "--keep-latest", "1"], {"run-a/1", "run-a/3"}),
    ],
)
def test_prune_deletes_exactly_the_promised_packages(
    tmp_path: Path, args: list[str], deleted: set[str]
) -> None:
    made = _fill(tmp_path)
    before = _tree(tmp_path)
    dry = run_cli("packages", "prune", *args, home=tmp_path)
    assert dry.returncode == 0, dry.stderr
    listed = {line.split("\t")[1].split("/", 1)[1] for line in dry.stdout.splitlines()}
    assert listed == deleted
    assert all(line.startswith("would delete\t") for line in dry.stdout.splitlines())
    assert "add --yes to delete" in dry.stderr
    assert _tree(tmp_path) == before  # a dry run touches nothing
    done = run_cli("packages", "prune", *args, "--yes", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _left(tmp_path) == ALL - deleted
    for key in deleted:  # files are gone too, not moved to retained/
        assert not made[key].exists()
    assert not (tmp_path / "retained").exists()


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        ([], "--keep-latest N"),
        (["--older-than", "soon"], "--older-than 'soon'"),
        (["--keep-latest", "-1"], "must be 0 or more"),
    ],
)
def test_prune_refuses_vague_or_bad_limits(tmp_path: Path, args: list[str], fix: str) -> None:
    _fill(tmp_path)
    before = _tree(tmp_path)
    assert fix in one_error_line(run_cli("packages", "prune", *args, home=tmp_path), "packages")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "command", [["packages", "list"], ["models"], ["packages", "prune", "--keep-latest", "1"]]
)
def test_read_only_commands_create_nothing(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    done = run_cli(*command, home=home)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not home.exists()
    home.mkdir()
    assert run_cli(*command, home=home).returncode == 0
    assert list(home.iterdir()) == []


def test_list_says_when_nothing_matched(tmp_path: Path) -> None:
    _fill(tmp_path)
    done = run_cli("packages", "list", "--group", "nope", home=tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    assert "no model package matched group 'nope' (groups: run-a, run-b)" in done.stderr
    listed = run_cli("packages", "list", "--kind", "model", home=tmp_path).stdout.splitlines()
    assert sorted(line.split("\t")[0].rsplit("/", 2)[1] for line in listed) == [
        "run-a",
        "run-a",
        "run-b",
    ]


def test_list_reads_a_read_only_home_without_a_tmp_directory(tmp_path: Path) -> None:
    """A home that has ``packages/`` but no ``packages/.tmp`` (copied, or made read-only after
    its last write) lists its packages and is left exactly as it was. (As root, chmod does not
    stop a write; the unchanged tree is what proves nothing was attempted.)"""
    made = _fill(tmp_path)
    (tmp_path / "packages" / ".tmp").rmdir()
    before = _tree(tmp_path)
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        done = run_cli("packages", "list", home=tmp_path)
        show = run_cli("packages", "show", _arn("run-b", 2), home=tmp_path)
    finally:
        for path in [tmp_path, *tmp_path.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    listed = sorted(line.split("\t")[0].split("/", 1)[1] for line in done.stdout.splitlines())
    assert listed == sorted(made)
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["ModelPackageArn"] == _arn("run-b", 2)
    assert _tree(tmp_path) == before


def _arn(group: str, version: int) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/{group}/{version}"
