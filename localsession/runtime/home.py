"""The state directory (``--home`` / ``$LOCALSESSION_HOME``): checks and the one-server lock.

- :func:`require_writable` makes the home (if missing) and proves it writable, or raises
  :class:`HomeError` with one line naming the directory and the fix. ``serve`` calls it at
  start-up, so a read-only home fails there rather than as a later, unrelated SDK error.
- :class:`HomeLock` is an exclusive ``flock`` on ``<home>/server.lock``, held by a
  ``localsession serve`` for its whole life. The file holds the server's PID, so a second
  server on the same home refuses to start and says which process holds it. The kernel drops
  the lock when the process dies, so a crashed server never leaves a stale lock.

Pure Python, no torch.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = "server.lock"
_FIX = "pass --home (or set LOCALSESSION_HOME to) a directory you can write"


class ConfigError(Exception):
    """A configuration mistake; the message is one line naming the setting and the fix.

    The CLI prints it as ``localsession <command>: error: <message>`` and exits 2.
    """


class HomeError(ConfigError):
    """A home that cannot be used; the message names the path and the fix."""


def require_writable(home: Path) -> None:
    """Create ``home`` if needed and check that files can be made in it."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise HomeError(f"home directory {home} is not writable ({reason}); {_FIX}") from None


class HomeLock:
    """An exclusive lock on one home for one server process: ``acquire`` or HomeError."""

    def __init__(self, home: Path) -> None:
        self.path = home / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise HomeError(
                f"cannot create the lock file {self.path} ({exc.strerror}); {_FIX}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise HomeError(f"cannot lock {self.path} ({exc.strerror}); {_FIX}") from None
            raise HomeError(
                f"home {self.path.parent} is in use by another localsession server "
                f"(pid {holder}); stop that server, or pass a different --home"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> HomeLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
