"""The Tinker client sessions' heartbeats: which sessions are live, when each was last heard
from, and which have finished. One owner with its own lock.

A live session is one whose heartbeats or requests arrive (expiry.py ends it when they stop
for the heartbeat timeout); a finished one (closed or expired) answers its late heartbeats
with 410. The dialect, expiry.py and the console read and change them through
:class:`Heartbeats`' methods.
"""

from __future__ import annotations

import threading
import time


class Heartbeats:
    """Live session id -> last heard from (``time.monotonic``), and the finished ids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}
        self._finished: set[str] = set()

    def beat(self, session_id: str) -> bool:
        """Note a heartbeat now (adopting a session this server does not know: it restarted);
        False, noting nothing, if the session has finished."""
        with self._lock:
            if session_id in self._finished:
                return False
            self._live[session_id] = time.monotonic()
            return True

    def touch(self, session_id: str | None) -> None:
        """A request of a live session counts as its heartbeat (others are left alone)."""
        with self._lock:
            if session_id in self._live:
                self._live[str(session_id)] = time.monotonic()

    def finish(self, session_id: str) -> None:
        """The session ended: no longer live, its later heartbeats refused."""
        with self._lock:
            self._live.pop(session_id, None)
            self._finished.add(session_id)

    def due(self, now: float, timeout: float) -> list[str]:
        """The live sessions not heard from for more than ``timeout`` seconds before ``now``."""
        with self._lock:
            return [sid for sid, seen in self._live.items() if now - seen > timeout]

    def live(self) -> dict[str, float]:
        """Live session id -> last heard from, a copy."""
        with self._lock:
            return dict(self._live)

    def finished(self) -> set[str]:
        with self._lock:
            return set(self._finished)

    def known(self, session_id: str) -> bool:
        """Whether the session is live or has finished here."""
        with self._lock:
            return session_id in self._live or session_id in self._finished
