"""Session records on disk, so a restarted server still knows the sessions it had.

One small JSON file per session, ``<home>/sessions/<name>.json``, written atomically (a
temporary file, ``fsync``, then ``os.replace``) when the session is created and whenever its
status changes, and removed when the session is deleted. A service started on the same home
loads them back as terminal sessions (:func:`restored_status`):

- a session that was still active when its server died (Created, Running, Blocked) comes back
  ``Failed``, with ErrorDetails saying the server restarted and how to resume;
- one caught ``Stopping`` comes back ``Stopped``;
- Stopped, Failed and Expired sessions come back as they were.

Restored sessions hold no model and take no work (runtime calls answer ConflictException);
they stay describable and listable, and can be deleted. The engine state itself (weights,
optimizer) is not kept here: that is what checkpoints (``save_state``) are for.

Session names are validated against the service pattern before they reach this module, so a
record's file name never leaves ``sessions/``; records whose name does not match are skipped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any

from localsession import vocab

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")
#: Statuses a session can only have while its server is alive.
LIVE = frozenset(
    {vocab.SESSION_CREATED, vocab.SESSION_SCHEDULED, vocab.SESSION_RUNNING, vocab.SESSION_BLOCKED}
)
RESTART_MESSAGE = (
    "The server restarted while this session was {status}; its in-memory model, optimizer "
    "state and queued operations were lost. Resume from its latest checkpoint, e.g. with "
    "create_training_client_from_state_with_optimizer(<model package ARN>, rank=<its rank>)."
)


def restored_status(status: str, error: str | None) -> tuple[str, str | None]:
    """The (status, ErrorDetails) a session recorded as ``status`` has after a restart."""
    if status in LIVE:
        return vocab.SESSION_FAILED, RESTART_MESSAGE.format(status=status)
    if status == "Stopping":
        return "Stopped", error
    return status, error


class SessionStore:
    """The ``sessions/`` directory of one home: save, remove and load session records."""

    def __init__(self, home: Path) -> None:
        self.root = home / "sessions"
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        if not _NAME_RE.match(name):  # never reached with a validated name; a last guard
            raise ValueError(f"session name {name!r} cannot name a record file")
        return self.root / f"{name}.json"

    def save(self, record: dict[str, Any]) -> None:
        """Write one session's record atomically (readers see the old or the new one)."""
        target = self._path(str(record["name"]))
        staging = self.root / f".{record['name']}.{uuid.uuid4().hex}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(staging, "w") as handle:
                json.dump(record, handle, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            with self._lock:  # a delete racing a late status write: the delete wins below
                os.replace(staging, target)
        except OSError:
            logger.exception("could not record session %s under %s", record["name"], self.root)
            staging.unlink(missing_ok=True)

    def remove(self, name: str) -> None:
        with self._lock:
            self._path(name).unlink(missing_ok=True)

    def load(self) -> list[dict[str, Any]]:
        """Every readable record (oldest first); interrupted writes are swept, corrupt
        records skipped with a warning."""
        if not self.root.is_dir():
            return []
        records = []
        for path in sorted(self.root.iterdir()):
            if path.name.endswith(".tmp"):
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
            records.append(record)
        return sorted(records, key=lambda r: str(r.get("creation_time", "")))
