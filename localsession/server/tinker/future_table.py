"""The Tinker request ids the SDK polls (``retrieve_future``), each with what it names.

One owner for the table and its lock, apart from the rest of the dialect's state: a request id
names a runtime op, a value known at once, or an error (:class:`Future`). The table lives in
memory, as Tinker's own futures do not outlive the server that issued them: an unknown id is
refused with a message that says to submit the request again.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from localsession.runtime import errors


@dataclass
class Future:
    """One Tinker request id: a runtime op, or a value known at once (or an error)."""

    kind: str
    session: str | None = None
    op_id: str | None = None
    sampling: bool = False
    model_id: str | None = None
    value: dict[str, Any] | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class FutureTable:
    """Request id -> :class:`Future`, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future] = {}

    def add(self, future: Future) -> str:
        """A new request id naming ``future``."""
        request_id = str(uuid.uuid4())
        with self._lock:
            self._futures[request_id] = future
        return request_id

    def get(self, request_id: str) -> Future:
        """The future ``request_id`` names; a 404 in the SDK's shape when there is none."""
        with self._lock:
            found = self._futures.get(request_id)
        if found is None:
            raise errors.not_found(
                f"request {request_id!r} is unknown to this server (futures do not survive "
                "a restart); submit the request again",
                runtime=True,
            )
        return found

    def forget(self, request_id: str) -> None:
        """Drop ``request_id`` (a streamed completion that was read to its end)."""
        with self._lock:
            self._futures.pop(request_id, None)
