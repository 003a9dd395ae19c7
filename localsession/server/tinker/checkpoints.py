"""The checkpoint index: ``tinker://`` paths resolved to model packages, with their TTLs,
user metadata and (for an external export) age recipients. One owner with its own lock.

A checkpoint is a package keyed by its ``tinker://`` path (``SaveCommand.key``, kept in the
package's record; its description names the path too, for ``localsession packages list``),
so it survives a restart: a path the in-memory index does not know is found by
``Service.control.find_package`` (which also finds checkpoints saved before packages had
keys, with the path as their description). What a save asks for (its TTL, its metadata,
an export's recipients, a sampler to make over it) is noted at submit, keyed to the op, and
recorded once, when the op completes (:meth:`CheckpointIndex.expect`): never when its result
is read, so an unread save still expires and a result read twice does not restart its TTL
(nor make a second sampler).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from localsession import vocab
from localsession.port_results import OpOutcome, SaveResult
from localsession.runtime import errors
from localsession.runtime.control import PackageRecord
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service

#: The start of every checkpoint path, and so of every key this dialect gives a package.
SCHEME = "tinker://"
#: The most characters of a package description (the runtime refuses longer ones).
DESCRIPTION_MAX = 1024


def description(path: str) -> str | None:
    """A checkpoint package's description: what ``localsession packages list`` shows of it
    (None, the runtime's default, for a path too long to fit)."""
    text = f"Tinker checkpoint {path}"
    return text if len(text) <= DESCRIPTION_MAX else None


def utcnow() -> datetime:
    """The clock TTLs are set and checked by (tests move it)."""
    return datetime.now(timezone.utc)


def ttl_seconds(value: Any) -> int | None:
    """A save's ``ttl_seconds``, checked at submit (None or 0: no TTL)."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.validation(f"ttl_seconds={value!r} must be a positive integer or None")
    return value


@dataclass(frozen=True)
class Saving:
    """What one save asks to record of its path once it completes."""

    path: str
    ttl_seconds: int | None = None
    metadata: dict[str, Any] | None = None
    recipients: list[str] | None = None  # an external export's (None: not an export)
    #: called once with the package ARN when the save completes (a sampler over it is made)
    then: Callable[[str], None] | None = None


class CheckpointIndex:
    """Path -> package ARN, TTL, user metadata and recipients, thread-safe."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._paths: dict[str, str] = {}  # tinker:// path -> package ARN
        self._ttl: dict[str, datetime] = {}  # tinker:// path -> expiry
        self._metadata: dict[str, dict[str, Any]] = {}  # tinker:// path -> user_metadata
        self._recipients: dict[str, list[str]] = {}  # external export -> age recipients
        self._saving: dict[tuple[str, str], Saving] = {}  # (session, op id) -> its record

    # -- saves ---------------------------------------------------------------------------

    def expect(self, session: str, op_id: str, saving: Saving) -> None:
        """Record ``saving`` when the save op ``op_id`` of ``session`` completes (from the
        thread that finishes it; at once if it has); a failed save records nothing."""
        with self._lock:
            self._saving[(session, op_id)] = saving

        def done(outcome: OpOutcome) -> None:
            if outcome.status == vocab.OpStatus.COMPLETED and isinstance(
                outcome.result, SaveResult
            ):
                self.completed(session, op_id, outcome.result.package_arn)
            else:
                with self._lock:
                    self._saving.pop((session, op_id), None)

        self.service.control.when_done(session, op_id, done)

    def completed(self, session: str, op_id: str, arn: str) -> None:
        """Record a completed save's path (once: a second call, such as a reader that came
        before the op's callback ran, finds nothing left to record)."""
        with self._lock:
            saving = self._saving.pop((session, op_id), None)
            if saving is None:
                return
            path = saving.path
            self._paths[path] = arn
            if saving.ttl_seconds:
                self._ttl[path] = utcnow() + timedelta(seconds=int(saving.ttl_seconds))
            if saving.metadata is not None:
                self._metadata[path] = dict(saving.metadata)
            if saving.recipients is not None:
                self._recipients[path] = list(saving.recipients)
        if saving.then is not None:
            saving.then(arn)

    # -- reads and edits -----------------------------------------------------------------

    def set_ttl(self, path: str, seconds: int | None) -> None:
        """``PUT .../ttl``: expire ``path`` ``seconds`` from now (None: never)."""
        with self._lock:
            if seconds is None:
                self._ttl.pop(path, None)
            else:
                self._ttl[path] = utcnow() + timedelta(seconds=int(seconds))

    def due(self) -> list[str]:
        """The paths whose TTL has passed."""
        now = utcnow()
        with self._lock:
            return [path for path, when in self._ttl.items() if when <= now]

    def listed(self, path: str, arn: str) -> tuple[datetime | None, dict[str, Any] | None]:
        """Note a listed package's path; its expiry and user metadata."""
        with self._lock:
            self._paths[path] = arn
            return self._ttl.get(path), self._metadata.get(path)

    def recipients(self, path: str) -> list[str]:
        """The age recipients an export is encrypted to (none: served plain)."""
        with self._lock:
            return list(self._recipients.get(path, []))

    def forget(self, path: str) -> None:
        with self._lock:
            self._paths.pop(path, None)
            self._ttl.pop(path, None)
            self._metadata.pop(path, None)
            self._recipients.pop(path, None)

    # -- lookups -------------------------------------------------------------------------

    def packages(self) -> list[PackageRecord]:
        """Every package this dialect saved (keyed by its tinker path), newest first."""
        try:
            return self.service.control.keyed_packages(SCHEME)
        except ServiceError:
            return []

    def package_of(self, path: str, *, required: bool = True) -> str:
        if not path.startswith(SCHEME):
            if required:
                raise errors.validation(f"path {path!r} must be a tinker:// checkpoint path")
            return ""
        with self._lock:
            arn = self._paths.get(path)
        if arn is None:
            found = self.service.control.find_package(path, SCHEME)
            arn = found.arn if found is not None else None
        if arn is None:
            if required:
                raise errors.not_found(
                    f"checkpoint {path} does not exist on this server; list them with "
                    "RestClient.list_checkpoints or `localsession packages list`",
                    runtime=True,
                )
            return ""
        with self._lock:
            self._paths[path] = arn
        return arn

    def info(self, path: str) -> PackageRecord:
        """The package a checkpoint path names (its base model, rank, whether it adapts the
        output head); a 404 naming the path if there is none."""
        return self.service.control.package(self.package_of(path))
