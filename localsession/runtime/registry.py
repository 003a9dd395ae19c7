"""The model-package registry on disk: versioned packages that outlive sessions and processes.

Layout under ``$LOCALSESSION_HOME`` (default ``~/.localsession``; docs/semantics.md#5)::

    packages/<group>/group.json               a group made by CreateModelPackageGroup
    packages/<group>/<version>/package.json   the index entry (JSON)
    packages/<group>/<version>/...            the engine's files (safetensors + JSON)
    packages/.tmp/                            packages being written
    retained/<group>-<version>/               artifacts kept by delete_model_package

A package is written whole into ``.tmp`` (engine files, then ``package.json``), then renamed
to its version directory in one atomic ``rename``. A directory without ``package.json`` is
never listed, so a crash at any point leaves no partial package visible; stale ``.tmp``
entries are swept on start. Versions count up per group from 1, allocated under a lock (a
thread lock plus an ``flock`` on the group, so two processes on one home never collide).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from localsession.runtime import errors

_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"model-package/(?P<group>[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})/(?P<version>[1-9]\d*)\Z"
)
_GROUP_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")
_GROUP_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package-group/(?P<name>[^/]*)\Z"
)
CHECKPOINT, MODEL = "checkpoint", "model"
INDEX_FILE = "package.json"
GROUP_FILE = "group.json"


@dataclass
class PackageInfo:
    """One package's index entry (``package.json``)."""

    arn: str
    group: str
    version: int
    kind: str
    base_model: str
    lora_rank: int
    lora_alpha: int
    creation_time: str
    description: str
    session: str
    merged: bool = False

    def created(self) -> datetime:
        return datetime.fromisoformat(self.creation_time)


def group_name(group: Any, *, field: str = "model package group") -> str:
    """A group name from a name or a ``model-package-group`` ARN, checked against the
    service patterns before it names anything on disk."""
    arn = _GROUP_ARN_RE.match(group) if isinstance(group, str) else None
    name = arn["name"] if arn else group
    if not isinstance(name, str) or not _GROUP_RE.match(name):
        shown = group[:200] if isinstance(group, str) else group
        raise errors.validation(
            f"{field} {shown!r} is invalid: use a name of 1-63 letters, digits "
            "and hyphens, or an arn:aws:sagemaker:<region>:<account>:model-package-group/<name>"
        )
    return name


def parse_arn(arn: Any) -> tuple[str, int]:
    """(group, version) of a model-package ARN, or a ValidationException naming the form."""
    match = _ARN_RE.match(arn) if isinstance(arn, str) else None
    if match is None:
        shown = arn[:200] if isinstance(arn, str) else arn
        raise errors.validation(
            f"modelPackageArn {shown!r} is not a model package version ARN; expected "
            "arn:aws:sagemaker:<region>:<account>:model-package/<group>/<version>"
        )
    return match["group"], int(match["version"])


class Registry:
    """Packages under one home directory."""

    def __init__(self, home: Path, region: str, account: str) -> None:
        self.root = home / "packages"
        self.retained = home / "retained"
        self.region, self.account = region, account
        self._tmp = self.root / ".tmp"
        self._lock = threading.Lock()
        self._tmp.mkdir(parents=True, exist_ok=True)
        for stale in self._tmp.iterdir():  # writes a crash interrupted
            shutil.rmtree(stale, ignore_errors=True)

    def arn(self, group: str, version: int) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account}:model-package/{group}/{version}"

    def group_arn(self, group: str) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account}:model-package-group/{group}"

    def create_group(self, group: str, description: str) -> dict[str, Any]:
        """Record a group (CreateModelPackageGroup); ResourceInUse if it was already made.

        Saves need no such call: a group comes into being with its first package.
        """
        group = group_name(group)
        with self._group_lock(group):
            index = self.root / group / GROUP_FILE
            if index.is_file():
                raise errors.resource_in_use(f"Model package group {group} already exists.")
            entry = {
                "ModelPackageGroupName": group,
                "ModelPackageGroupArn": self.group_arn(group),
                "ModelPackageGroupDescription": description,
                "CreationTime": datetime.now(timezone.utc).isoformat(),
                "ModelPackageGroupStatus": "Completed",
            }
            (self.root / group).mkdir(parents=True, exist_ok=True)
            staging = index.with_name(f".{GROUP_FILE}.tmp")
            _write_json(staging, entry)
            os.rename(staging, index)
        return entry

    def describe_group(self, group: str) -> dict[str, Any]:
        """DescribeModelPackageGroup: a created group, or one that holds packages."""
        group = group_name(group)
        index = self.root / group / GROUP_FILE
        if index.is_file():
            return dict(json.loads(index.read_text()))
        if any(self._versions(group)):
            return {
                "ModelPackageGroupName": group,
                "ModelPackageGroupArn": self.group_arn(group),
                "ModelPackageGroupStatus": "Completed",
            }
        raise errors.not_found(f"Model package group {group} does not exist.", runtime=False)

    def path(self, arn: str) -> Path:
        group, version = parse_arn(arn)
        return self.root / group / str(version)

    @contextmanager
    def _group_lock(self, group: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.root / f".{group}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def create(
        self,
        group: str,
        *,
        kind: str,
        base_model: str,
        lora_rank: int,
        lora_alpha: int,
        description: str,
        session: str,
        merged: bool,
        write: Callable[[Path], None],
    ) -> PackageInfo:
        """Write a new version of ``group``: ``write(tmp_dir)`` fills it, then one rename."""
        group = group_name(group)
        staging = self._tmp / uuid.uuid4().hex
        staging.mkdir()
        try:
            write(staging)
            with self._group_lock(group):
                version = 1 + max((v for v in self._versions(group)), default=0)
                info = PackageInfo(
                    arn=self.arn(group, version),
                    group=group,
                    version=version,
                    kind=kind,
                    base_model=base_model,
                    lora_rank=lora_rank,
                    lora_alpha=lora_alpha,
                    creation_time=datetime.now(timezone.utc).isoformat(),
                    description=description,
                    session=session,
                    merged=merged,
                )
                _write_json(staging / INDEX_FILE, asdict(info))
                (self.root / group).mkdir(parents=True, exist_ok=True)
                os.rename(staging, self.root / group / str(version))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return info

    def _versions(self, group: str) -> Iterator[int]:
        folder = self.root / group
        if not folder.is_dir():
            return
        for entry in folder.iterdir():
            if entry.name.isdigit() and (entry / INDEX_FILE).is_file():
                yield int(entry.name)

    def get(self, arn: str) -> PackageInfo:
        """The package an ARN names; ResourceNotFound if it does not exist."""
        index = self.path(arn) / INDEX_FILE
        try:
            data = json.loads(index.read_text())
        except FileNotFoundError:
            raise errors.not_found(f"Model package {arn} does not exist.", runtime=False) from None
        return PackageInfo(**data)

    def groups(self) -> list[str]:
        """Every group holding at least one package."""
        if not self.root.is_dir():
            return []
        return sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and any(self._versions(d.name))
        )

    def list(self, group: str) -> list[PackageInfo]:
        """Every package of ``group``, newest first."""
        group = group_name(group)
        found = [self.get(self.arn(group, v)) for v in self._versions(group)]
        return sorted(found, key=lambda p: p.version, reverse=True)

    def delete(self, arn: str, *, keep_artifacts: bool) -> tuple[Path | None, int]:
        """Remove a package from the registry; return (where its files were kept, files deleted).

        The directory leaves the registry in one rename, so the package is never half-deleted.
        """
        info = self.get(arn)
        source = self.path(arn)
        if keep_artifacts:
            target = self.retained / f"{info.group}-{info.version}-{uuid.uuid4().hex[:8]}"
            self.retained.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)
            (target / INDEX_FILE).unlink()
            return target, 0
        doomed = self._tmp / f"deleted-{uuid.uuid4().hex}"
        os.rename(source, doomed)
        count = sum(1 for p in doomed.rglob("*") if p.is_file())
        shutil.rmtree(doomed)
        return None, count


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
