"""Session records on disk, so a restarted server still knows the sessions it had.

One small JSON file per session, ``<home>/sessions/<name>.json``, written atomically (a
temporary file, ``fsync``, then ``os.replace``) when the session is created and whenever its
status changes, and removed when the session is deleted. :func:`session_record` writes what a
record holds and :func:`restore_session` reads it; a service started on the same home loads
the records back as terminal sessions (:func:`restored_status`):

- a session that was still active when its server died (Created, Running, Blocked) comes back
  ``Failed``, with ErrorDetails saying the server restarted and how to resume;
- one caught ``Stopping`` comes back ``Stopped``;
- Stopped, Failed and Expired sessions come back as they were.

Restored sessions hold no model and take no work (runtime calls answer ConflictException);
they stay describable and listable, and can be deleted. The engine state itself (weights,
optimizer) is not kept here: that is what checkpoints (``save_state``) are for.

Several processes may share one home (in-process services with records turned on; a server
takes the whole home, runtime/home.py). Each record names its **owner**, a token for the
process that wrote it, and each owner holds an ``flock`` on ``sessions/.owners/<token>.lock``
for its whole life. A service loading the records skips those whose owner still holds its
lock (another live process's sessions, not its to restore or mark Failed); the kernel drops
the lock when the owner dies, however it dies, and only then are its live sessions restored as
Failed. Records of this same process (a service restarted in-process) are restored as before.

Session names are validated against the service pattern before they reach this module, so a
record's file name never leaves ``sessions/``; records whose name does not match are skipped.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from localsession import vocab
from localsession.port import EngineSpec
from localsession.runtime.packages.registry import Registry
from localsession.runtime.sessions.lifecycle import Session

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")
#: Statuses a session can only have while its server is alive.
LIVE = frozenset(
    {
        vocab.SessionStatus.CREATED,
        vocab.SessionStatus.SCHEDULED,
        vocab.SessionStatus.RUNNING,
        vocab.SessionStatus.BLOCKED,
    }
)
RESTART_MESSAGE = (
    "The server restarted while this session was {status}; its in-memory model, optimizer "
    "state and queued operations were lost. Resume from its latest checkpoint, e.g. with "
    "create_training_client_from_state_with_optimizer(<model package ARN>, rank=<its rank>)."
)


OWNERS = ".owners"
_TOKEN_RE = re.compile(r"^[0-9]{1,10}-[0-9a-f]{12}\Z")
#: This process's owner token and the lock files it holds, per sessions directory.
_owner: tuple[int, str] | None = None
_held: dict[Path, int] = {}
_owner_lock = threading.Lock()


def owner_token() -> str:
    """This process's owner token: its PID and a random part (PIDs are reused; forks differ)."""
    global _owner
    with _owner_lock:
        if _owner is None or _owner[0] != os.getpid():
            _owner = (os.getpid(), f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
            _held.clear()  # a forked child holds none of its parent's locks
        return _owner[1]


def _hold(root: Path, token: str) -> None:
    """Take (once per process and directory) this process's owner lock under ``root``."""
    with _owner_lock:
        if root in _held:
            return
        folder = root / OWNERS
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{token}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh token: never contended
        _held[root] = fd


def owner_alive(root: Path, token: str) -> bool:
    """Whether the process behind ``token`` still runs (holds its lock); a dead owner's lock
    file is removed."""
    if not _TOKEN_RE.match(token):  # records are data: never let one name a path
        return False
    path = root / OWNERS / f"{token}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return True
        raise
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)  # we held it, so its owner is gone
    return False


def restored_status(status: str, error: str | None) -> tuple[vocab.SessionStatus, str | None]:
    """The (status, ErrorDetails) a session recorded as ``status`` has after a restart."""
    if status in LIVE:
        return vocab.SessionStatus.FAILED, RESTART_MESSAGE.format(status=status)
    if status == vocab.SessionStatus.STOPPING:
        return vocab.SessionStatus.STOPPED, error
    return vocab.SessionStatus(status), error


def session_record(session: Session) -> dict[str, Any]:
    """What a session's record keeps of it (JSON-able), read under its lock."""
    with session.lock:
        return {
            "name": session.name,
            "arn": session.arn,
            "status": session.status,
            "error_details": session.error_details,
            "creation_time": session.creation_time.isoformat(),
            "last_modified_time": session.last_modified_time.isoformat(),
            "end_time": session.end_time.isoformat() if session.end_time else None,
            "last_received": session.queue.last_received,
            "usage": session.usage.wire(),
            "spec": {
                "base_model": session.spec.base_model,
                "rank": session.spec.rank,
                "alpha": session.spec.alpha,
            },
            "strict": session.strict,
            "details": session.details,
        }


def restore_session(
    record: dict[str, Any],
    registry: Callable[[], Registry],
    on_change: Callable[[Session], None] | None = None,
) -> Session:
    """A terminal session rebuilt from its record: no worker, no engine; a session that was
    live when its server died comes back Failed (:func:`restored_status`)."""
    spec = record["spec"]
    session = Session(
        record["name"],
        record["arn"],
        EngineSpec(spec["base_model"], int(spec["rank"]), int(spec["alpha"])),
        dict(record.get("details") or {}),
        strict=bool(record.get("strict", True)),
        gap_timeout=0.0,
        engine_factory=lambda spec: None,  # type: ignore[arg-type,return-value]
        registry=registry,
        on_change=on_change,
        start=False,
    )
    session.status, session.error_details = restored_status(
        record["status"], record.get("error_details")
    )
    session.creation_time = datetime.fromisoformat(record["creation_time"])
    session.last_modified_time = datetime.fromisoformat(record["last_modified_time"])
    if record.get("end_time"):
        session.end_time = datetime.fromisoformat(record["end_time"])
    elif session.status != record["status"]:
        session.end_time = session.last_modified_time
    session.queue.last_received = int(record.get("last_received", 0))
    session.usage.restore(record.get("usage") or {})
    return session


class SessionStore:
    """The ``sessions/`` directory of one home: save, remove and load session records."""

    def __init__(self, home: Path) -> None:
        self.root = home / "sessions"
        self._mutex = threading.Lock()
        self.owner = owner_token()

    def _path(self, name: str) -> Path:
        if not _NAME_RE.match(name):  # never reached with a validated name; a last guard
            raise ValueError(f"session name {name!r} cannot name a record file")
        return self.root / f"{name}.json"

    def save(self, record: dict[str, Any]) -> None:
        """Write one session's record atomically (readers see the old or the new one)."""
        target = self._path(str(record["name"]))
        staging = self.root / f".{record['name']}.{self.owner}.{uuid.uuid4().hex}.tmp"
        record = {**record, "owner": self.owner}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            _hold(self.root, self.owner)
            with open(staging, "w") as handle:
                json.dump(record, handle, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            with self._mutex:  # a delete racing a late status write: the delete wins below
                os.replace(staging, target)
        except OSError:
            logger.exception("could not record session %s under %s", record["name"], self.root)
            staging.unlink(missing_ok=True)

    def remove(self, name: str) -> None:
        with self._mutex:
            self._path(name).unlink(missing_ok=True)

    def _in_flight(self, staging: str) -> bool:
        """Whether a ``.<name>.<owner>.<hex>.tmp`` write may still be renamed into place."""
        parts = staging[1 : -len(".tmp")].split(".")
        if len(parts) != 3:
            return False
        return parts[1] == self.owner or owner_alive(self.root, parts[1])

    def load(self) -> list[dict[str, Any]]:
        """Every readable record not owned by another live process (oldest first);
        interrupted writes are swept, corrupt records skipped with a warning."""
        if not self.root.is_dir():
            return []
        records = []
        for path in sorted(self.root.iterdir()):
            if path.name.endswith(".tmp"):
                if not self._in_flight(path.name):
                    path.unlink(missing_ok=True)  # a write a crash interrupted
                continue
            if path.suffix != ".json" or not _NAME_RE.match(path.stem):
                continue
            try:
                record = json.loads(path.read_text())
                if not isinstance(record, dict) or record.get("name") != path.stem:
                    raise ValueError("the record does not name this session")
            except (OSError, ValueError) as exc:
                logger.warning("skipping unreadable session record %s: %s", path, exc)
                continue
            owner = record.pop("owner", None)
            if isinstance(owner, str) and owner != self.owner and owner_alive(self.root, owner):
                continue  # a session of another running process sharing this home
            records.append(record)
        return sorted(records, key=lambda r: str(r.get("creation_time", "")))
