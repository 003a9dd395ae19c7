"""The model-package registry on disk: versioned packages that outlive sessions and processes.

Layout under ``$LOCALSESSION_HOME`` (default ``~/.localsession``; docs/semantics.md#5)::

    packages/<group>/group.json               a group made by CreateModelPackageGroup
    packages/<group>/<version>/package.json   the index entry (JSON)
    packages/<group>/<version>/...            the engine's files (safetensors + JSON)
    packages/.tmp/                            packages being written
    retained/<group>-<version>-<id>/          artifacts kept by delete_model_package
                                              (``retained.json`` says what they were)

Every package has an ``s3://`` URI (``PackageInfo.s3_uri``, under its session's
``S3OutputPath``): the S3 view of its files (runtime/packages/artifacts.py) that ``serve``
answers S3 calls with. Retained artifacts keep their URI, as objects left in S3 would.

A package is written whole into ``.tmp`` (engine files, then ``package.json``), then renamed
to its version directory in one atomic ``rename``. A directory without ``package.json`` is
never listed, so a crash at any point leaves no partial package visible; ``.tmp`` entries
whose writer process no longer runs are swept on start (another process's write in progress
is left alone). Versions count up per group from 1, allocated under a lock (a thread lock
plus an ``flock`` on the group, so two processes on one home never collide).
Only writes create directories, so reading a home (even a read-only one) creates nothing.
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

from localsession import vocab
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
RETAINED_FILE = "retained.json"
#: Where packages saved without an ``s3://`` output path (or before packages had URIs) live
#: in S3 terms: ``s3://localsession/packages/<group>/<version>/``.
DEFAULT_S3_PREFIX = "s3://localsession/packages"


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
    #: The package's location in S3 terms, ending in ``/`` ("" in packages saved before
    #: packages had URIs: :meth:`location` then gives the default one).
    s3_uri: str = ""
    #: The name the saving dialect gave the package (Tinker: its ``tinker://`` path; ""
    #: for none, and in packages saved before keys: runtime/control.py reads those).
    key: str = ""

    def created(self) -> datetime:
        return datetime.fromisoformat(self.creation_time)

    def location(self) -> str:
        """The package's ``s3://`` URI (a prefix, ending in ``/``)."""
        return self.s3_uri or f"{DEFAULT_S3_PREFIX}/{self.group}/{self.version}/"


def package_s3_uri(output_path: Any, session: str, group: str, version: int) -> str:
    """Where a session's package lives under its ``S3OutputPath``:
    ``<path>/<session>/<group>/<version>/``, or under :data:`DEFAULT_S3_PREFIX` when the path
    is not an ``s3://bucket/...`` URI."""
    if isinstance(output_path, str) and output_path.startswith("s3://"):
        bucket, _, key = output_path[len("s3://") :].partition("/")
        if bucket and "/" not in bucket:
            key = "/".join(part for part in key.split("/") if part)
            base = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
            return f"{base}/{session}/{group}/{version}/"
    return f"{DEFAULT_S3_PREFIX}/{group}/{version}/"


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
        self._mutex = threading.Lock()
        # Opening creates nothing (reading a read-only home works); ``.tmp`` is made by the
        # first write. A sweep that cannot delete (a read-only home) leaves things as they are.
        if self._tmp.is_dir():
            for stale in self._tmp.iterdir():  # writes a crash interrupted
                if not _writer_alive(stale.name):
                    shutil.rmtree(stale, ignore_errors=True)

    def arn(self, group: str, version: int, region: str | None = None) -> str:
        """A package version's ARN, in ``region`` (default: the registry's)."""
        where = region or self.region
        return f"arn:aws:sagemaker:{where}:{self.account}:model-package/{group}/{version}"

    def group_arn(self, group: str, region: str | None = None) -> str:
        where = region or self.region
        return f"arn:aws:sagemaker:{where}:{self.account}:model-package-group/{group}"

    def create_group(
        self, group: str, description: str, region: str | None = None
    ) -> dict[str, Any]:
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
                "ModelPackageGroupArn": self.group_arn(group, region),
                "ModelPackageGroupDescription": description,
                "CreationTime": datetime.now(timezone.utc).isoformat(),
                "ModelPackageGroupStatus": vocab.PackageStatus.COMPLETED,
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
                "ModelPackageGroupStatus": vocab.PackageStatus.COMPLETED,
            }
        raise errors.not_found(f"Model package group {group} does not exist.", runtime=False)

    def path(self, arn: str) -> Path:
        group, version = parse_arn(arn)
        return self.root / group / str(version)

    @contextmanager
    def _group_lock(self, group: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._mutex, open(self.root / f".{group}.lock", "a") as handle:
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
        region: str | None = None,
        s3_output_path: str | None = None,
        key: str = "",
    ) -> PackageInfo:
        """Write a new version of ``group``: ``write(tmp_dir)`` fills it, then one rename.
        Its ARN names ``region`` (default the registry's); its S3 URI lies under
        ``s3_output_path`` (:func:`package_s3_uri`); ``key`` is its dialect's name for it."""
        group = group_name(group)
        staging = self._tmp / f"{os.getpid()}-{uuid.uuid4().hex}"
        self._tmp.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        try:
            write(staging)
            with self._group_lock(group):
                version = 1 + max((v for v in self._versions(group)), default=0)
                info = PackageInfo(
                    arn=self.arn(group, version, region),
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
                    s3_uri=package_s3_uri(s3_output_path, session, group, version),
                    key=key,
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
        return _info(data)

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
        if keep_artifacts and any(artifact_files(source)):
            target = self.retained / f"{info.group}-{info.version}-{uuid.uuid4().hex[:8]}"
            self.retained.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)
            os.rename(target / INDEX_FILE, target / RETAINED_FILE)
            return target, 0
        doomed = self._tmp / f"deleted-{os.getpid()}-{uuid.uuid4().hex}"
        self._tmp.mkdir(parents=True, exist_ok=True)
        os.rename(source, doomed)
        count = sum(1 for _ in artifact_files(doomed))
        shutil.rmtree(doomed)
        return None, count

    def artifact_dirs(self) -> Iterator[tuple[PackageInfo, Path]]:
        """Every directory holding artifacts in S3 terms: each package, then each retained
        package (its ``retained.json``), with its index entry."""
        for group in self.groups():
            for version in self._versions(group):
                folder = self.root / group / str(version)
                try:
                    yield _info(json.loads((folder / INDEX_FILE).read_text())), folder
                except (OSError, ValueError, TypeError):
                    continue  # deleted meanwhile, or not a package this version wrote
        if self.retained.is_dir():
            for folder in sorted(self.retained.iterdir()):
                try:
                    yield _info(json.loads((folder / RETAINED_FILE).read_text())), folder
                except (OSError, ValueError, TypeError):
                    continue  # kept before retained packages recorded their URI


def artifact_files(folder: Path) -> Iterator[Path]:
    """The artifact files of a package directory: everything but its index entry."""
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.parent == folder and path.name in (INDEX_FILE, RETAINED_FILE):
            continue
        if path.is_file():
            yield path


def _writer_alive(name: str) -> bool:
    """Whether the process that made ``.tmp`` entry ``name`` (``[deleted-]<pid>-<id>``) still
    runs: another process on this home may be writing that package right now, so only the
    entries of dead writers (and unnamed ones, from older versions) are swept."""
    pid = name.removeprefix("deleted-").split("-", 1)[0]
    if not pid.isdigit() or not 0 < int(pid) < 2**31:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def _info(data: dict[str, Any]) -> PackageInfo:
    known = {k: v for k, v in data.items() if k in PackageInfo.__dataclass_fields__}
    return PackageInfo(**known)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
