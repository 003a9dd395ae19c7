"""The registry's files in S3 terms: objects under each package's ``s3://`` URI.

Every package (and every package whose artifacts ``delete_model_package`` kept) has an
``s3://bucket/prefix/`` URI (registry ``PackageInfo.location``). Its files are the objects
under that prefix: ``adapter_model.safetensors`` becomes ``prefix/adapter_model.safetensors``,
``merged/config.json`` becomes ``prefix/merged/config.json``. The index entry
(``package.json`` / ``retained.json``) is the registry's record, not an object.

:class:`Artifacts` answers what the S3 operations need (list, head, get, delete) with no
HTTP in it, so the server (server/s3.py) and an in-process botocore-hooks carrier share it.
Errors are :class:`ServiceError` with S3's codes (``NoSuchKey``, ``InvalidArgument``).
Every bucket exists (empty unless a package lives in it): buckets are not modelled.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from localsession.runtime.errors import ServiceError
from localsession.runtime.packages.registry import RETAINED_FILE, Registry, artifact_files

#: Most keys one ListObjectsV2 page returns (S3's own cap).
MAX_KEYS = 1000


@dataclass(frozen=True)
class S3Object:
    """One object: its key, the file behind it, and what S3 reports about it."""

    bucket: str
    key: str
    path: Path
    size: int
    last_modified: datetime
    etag: str  # quoted hex MD5 of the content, as S3 reports a single-part object


@dataclass(frozen=True)
class Listing:
    """One ListObjectsV2 page."""

    objects: list[S3Object]
    common_prefixes: list[str]
    truncated: bool
    next_token: str | None


def no_such_key(bucket: str, key: str) -> ServiceError:
    return ServiceError("NoSuchKey", f"The specified key does not exist: s3://{bucket}/{key}", 404)


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of an ``s3://bucket/prefix/`` URI."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


class Artifacts:
    """The S3 view of one registry."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._etags: dict[tuple[str, int, int, int], str] = {}
        self._mutex = threading.Lock()

    def _dirs(self, bucket: str) -> Iterator[tuple[str, Path]]:
        """(key prefix, directory) of every package stored in ``bucket``."""
        for info, folder in self.registry.artifact_dirs():
            where, prefix = split_uri(info.location())
            if where == bucket:
                yield prefix, folder

    def _object(self, bucket: str, key: str, path: Path) -> S3Object:
        stat = path.stat()
        return S3Object(
            bucket=bucket,
            key=key,
            path=path,
            size=stat.st_size,
            last_modified=datetime.fromtimestamp(stat.st_mtime, timezone.utc),
            etag=self._etag(path, stat.st_ino, stat.st_mtime_ns, stat.st_size),
        )

    def _etag(self, path: Path, inode: int, mtime_ns: int, size: int) -> str:
        cache_key = (str(path), inode, mtime_ns, size)
        with self._mutex:
            cached = self._etags.get(cache_key)
        if cached is not None:
            return cached
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        etag = f'"{digest.hexdigest()}"'
        with self._mutex:
            self._etags[cache_key] = etag
        return etag

    def _all(self, bucket: str, prefix: str) -> list[tuple[str, Path]]:
        found: dict[str, Path] = {}
        for base, folder in self._dirs(bucket):
            if not (base.startswith(prefix) or prefix.startswith(base)):
                continue
            for path in artifact_files(folder):
                key = base + path.relative_to(folder).as_posix()
                if key.startswith(prefix):
                    found.setdefault(key, path)
        return sorted(found.items())

    def list(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str = "",
        start_after: str = "",
        token: str | None = None,
        max_keys: int = MAX_KEYS,
    ) -> Listing:
        """ListObjectsV2: keys under ``prefix`` in UTF-8 order, after ``start_after`` or the
        continuation ``token`` (the last key of the previous page)."""
        if not 0 <= max_keys:
            raise ServiceError("InvalidArgument", f"max-keys {max_keys} must be >= 0", 400)
        max_keys = min(max_keys, MAX_KEYS)
        after = token if token is not None else start_after
        objects: list[S3Object] = []
        prefixes: list[str] = []
        last = ""
        truncated = False
        for key, path in self._all(bucket, prefix):
            if key <= after:
                continue
            if delimiter:
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if prefixes and prefixes[-1] == common:
                        last = key
                        continue
                    if len(objects) + len(prefixes) >= max_keys:
                        truncated = True
                        break
                    prefixes.append(common)
                    last = key
                    continue
            if len(objects) + len(prefixes) >= max_keys:
                truncated = True
                break
            try:
                objects.append(self._object(bucket, key, path))
            except FileNotFoundError:
                continue  # deleted while listing
            last = key
        return Listing(objects, prefixes, truncated, last if truncated else None)

    def _find(self, bucket: str, key: str) -> tuple[Path, Path]:
        """(file, its package directory) behind ``key``; NoSuchKey if none."""
        for base, folder in self._dirs(bucket):
            if not key.startswith(base) or len(key) == len(base):
                continue
            relative = key[len(base) :]
            parts = relative.split("/")
            if any(part in ("", ".", "..") for part in parts):
                continue
            path = folder.joinpath(*parts)
            if path in set(artifact_files(folder)):
                return path, folder
        raise no_such_key(bucket, key)

    def head(self, bucket: str, key: str) -> S3Object:
        """HeadObject / GetObject: the object at ``key``; NoSuchKey if there is none."""
        path, _ = self._find(bucket, key)
        try:
            return self._object(bucket, key, path)
        except FileNotFoundError:
            raise no_such_key(bucket, key) from None

    def delete(self, bucket: str, key: str) -> bool:
        """DeleteObject: remove the file behind ``key`` (True), or nothing (False: S3
        deletes of absent keys succeed too). Emptied folders go with it; so does a
        retained package once its last object is gone."""
        try:
            path, folder = self._find(bucket, key)
        except ServiceError:
            return False
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        parent = path.parent
        while parent != folder and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
        if (folder / RETAINED_FILE).is_file() and not any(artifact_files(folder)):
            shutil.rmtree(folder, ignore_errors=True)
        return True
