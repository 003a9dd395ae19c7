"""The sessions a service holds: a table by name, its limits, idle expiry, and its records.

:class:`SessionTable` is the service's one collection of :class:`Session` objects. It guards
the name and ``max_sessions`` checks of a new session under one lock, expires idle sessions
before a lookup, and (with ``persist_sessions``) keeps a record of each session under
``home/sessions``, restoring them at start so a restarted server reports what it lost
(runtime/sessions/persist.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from localsession import vocab
from localsession.runtime import errors
from localsession.runtime.config import ServiceConfig
from localsession.runtime.packages.registry import Registry
from localsession.runtime.sessions.lifecycle import Session
from localsession.runtime.sessions.persist import SessionStore, restore_session, session_record

logger = logging.getLogger(__name__)


class SessionTable:
    """Sessions by name, with their on-disk records when the config persists them."""

    def __init__(self, config: ServiceConfig, registry: Callable[[], Registry]) -> None:
        self.config = config
        self._mutex = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._store = SessionStore(config.home) if config.persist_sessions else None
        if self._store is not None:
            for record in self._store.load():
                try:
                    session = restore_session(record, registry, self.persist)
                except (KeyError, TypeError, ValueError) as exc:
                    logger.warning("skipping session record %r: %r", record.get("name"), exc)
                    continue
                self._sessions[session.name] = session
                self._store.save(session_record(session))

    def persist(self, session: Session) -> None:
        """Record a session's new status (called under its lock; see sessions/persist.py)."""
        if self._store is not None:
            self._store.save(session_record(session))

    def get(self, name: Any, *, runtime: bool) -> Session:
        """A session by name (idle ones expired first); ``ResourceNotFoundException`` of the
        runtime's or the control plane's model (``runtime``) if there is none."""
        if self.config.idle_timeout is not None:  # (looked at here: this runs on every op)
            self.expire_idle()
        with self._mutex:
            session = self._sessions.get(name) if isinstance(name, str) else None
        if session is None:
            raise errors.not_found(f"Training session {name!r} does not exist.", runtime=runtime)
        return session

    def all(self) -> list[Session]:
        """Every session (a snapshot list, any status)."""
        with self._mutex:
            return list(self._sessions.values())

    def expire_idle(self) -> None:
        """Expire every session idle longer than ``config.idle_timeout`` (if one is set)."""
        idle = self.config.idle_timeout
        if idle is None:
            return
        now = time.monotonic()
        for session in self.all():
            if session.running_op is None and now - session.last_activity > idle:
                session.expire()

    def add(self, name: str, make: Callable[[], Session]) -> Session:
        """Add the session ``make()`` builds, unless ``name`` is taken or the active sessions
        are at ``max_sessions`` (checked and added under one lock); record it."""
        with self._mutex:
            if name in self._sessions:
                raise errors.resource_in_use(f"Training session {name} already exists.")
            active = sum(s.status in vocab.SESSION_ACTIVE for s in self._sessions.values())
            if active >= self.config.max_sessions:
                raise errors.limit_exceeded(
                    f"{active} sessions are active, the limit is {self.config.max_sessions}. "
                    "Stop a session first, or raise the limit (LOCALSESSION_MAX_SESSIONS / "
                    "--max-sessions)."
                )
            session = self._sessions[name] = make()
        with session.lock:
            self.persist(session)
        return session

    def remove(self, name: str) -> None:
        """Forget a session and its record."""
        with self._mutex:
            self._sessions.pop(name, None)
        if self._store is not None:
            self._store.remove(name)

    def clear(self, *, forget: bool) -> int:
        """Stop and drop every session; return how many. Their records go too when
        ``forget``; otherwise they stay, as Stopped, for the next service on this home."""
        with self._mutex:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            if session.status in vocab.SESSION_ACTIVE:
                session.stop()
        for session in sessions:
            session.runner.join(timeout=10.0)
            if forget and self._store is not None:
                self._store.remove(session.name)
        return len(sessions)
