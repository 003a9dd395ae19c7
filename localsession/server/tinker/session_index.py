"""Tinker sessions as the RestClient lists them: ``GET /api/v1/sessions`` and
``GET /api/v1/sessions/{session_id}`` (``list_sessions()`` / ``get_session()``, SDK 0.38).

Each ``create_session`` leaves a record here: when it was made, its ``user_metadata`` and
``display_name``, and the ids of the sampling sessions made in it. A session's training runs
are the models whose id it prefixes (``<session_id>:train:<n>``). Records live in memory for
the server's life, closed and expired sessions included (as the hosted API lists finished
sessions); a session a restarted server adopted from a heartbeat is listed from then on.

``list_sessions`` answers session ids newest first, ``limit`` (default 20) from ``offset``;
``access_scope`` is accepted and changes nothing (one local owner: rest.py's
``LOCAL_OWNER``). An unknown id is a 404 naming it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localsession.runtime import errors

Handler = Callable[[Request], Awaitable[Response]]
#: The SDK's default page size for ``list_sessions``.
DEFAULT_LIMIT = 20


@dataclass
class SessionRecord:
    """What the RestClient reads of one Tinker session."""

    session_id: str
    created: datetime
    user_metadata: dict[str, Any] | None = None
    display_name: str | None = None
    sampler_ids: list[str] = field(default_factory=list)


class SessionIndex:
    """Every session this server saw, by id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, SessionRecord] = {}

    def add(
        self,
        session_id: str,
        user_metadata: dict[str, Any] | None = None,
        display_name: str | None = None,
    ) -> None:
        """Record a session (``create_session``, or one adopted from a heartbeat)."""
        now = datetime.now(timezone.utc)
        with self._lock:
            if session_id not in self._records:
                self._records[session_id] = SessionRecord(
                    session_id, now, user_metadata, display_name
                )

    def add_sampler(self, session_id: str | None, sampler_id: str) -> None:
        if not session_id:
            return
        self.add(session_id)
        with self._lock:
            self._records[session_id].sampler_ids.append(sampler_id)

    def page(self, limit: int, offset: int) -> list[str]:
        """Session ids, newest first, ``limit`` from ``offset``."""
        if limit < 0 or offset < 0:
            raise errors.validation(f"limit={limit} and offset={offset} must be >= 0")
        with self._lock:
            ordered = sorted(self._records.values(), key=lambda r: r.created, reverse=True)
        return [r.session_id for r in ordered[offset : offset + limit]]

    def record(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            return self._records.get(session_id)


def described(request: dict[str, Any]) -> dict[str, Any]:
    """The ``user_metadata`` and ``display_name`` of a ``create_session`` request."""
    metadata, name = request.get("user_metadata"), request.get("display_name")
    return {
        "user_metadata": dict(metadata) if isinstance(metadata, dict) else None,
        "display_name": name if isinstance(name, str) else None,
    }


def get_session(index: SessionIndex, models: list[str], session_id: str) -> dict[str, Any]:
    """The ``GetSessionResponse`` body of ``session_id`` (``models``: every model id)."""
    record = index.record(session_id)
    runs = [m for m in models if m.partition(":")[0] == session_id]
    if record is None and not runs:
        raise errors.not_found(
            f"session {session_id!r} is unknown to this server (list_sessions() lists them; "
            "sessions are kept in memory, so a restarted server lists only new ones)",
            runtime=True,
        )
    metadata = record.user_metadata if record else None
    return {
        "training_run_ids": runs,
        "sampler_ids": list(record.sampler_ids) if record else [],
        "user_metadata": {str(k): str(v) for k, v in metadata.items()} if metadata else None,
        "display_name": record.display_name if record else None,
    }


def _int_param(request: Request, key: str, default: int) -> int:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.validation(f"{key}={raw!r} must be a whole number") from None


def table(index: SessionIndex, models: Callable[[], list[str]]) -> list[tuple[str, Handler, str]]:
    """The two routes, for routes.py's table (``models``: every model id, now)."""

    async def list_sessions(request: Request) -> Response:
        limit = _int_param(request, "limit", DEFAULT_LIMIT)
        offset = _int_param(request, "offset", 0)
        return JSONResponse({"sessions": index.page(limit, offset)})

    async def one_session(request: Request) -> Response:
        session_id = request.path_params["session"]
        body = await run_in_threadpool(lambda: get_session(index, models(), session_id))
        return JSONResponse(body)

    return [
        ("/sessions", list_sessions, "GET"),
        ("/sessions/{session}", one_session, "GET"),
    ]
