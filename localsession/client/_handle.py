"""Client lifetime: the submit gate a client closes, and the automatic stop of a session.

``BackgroundSubmitter`` keeps the SDK's name and contract (closing it makes every later submit
raise the SDK's "client is closed" ``TrainingSessionError``), but in-process a submit is a
direct call into the runtime that returns at once, so no thread is needed.

``_SessionHandle`` mirrors the SDK's (sagemaker-sdk.md §13.2): one per session, shared by the
training client, its derived sampling clients and their futures; when the last of them is
collected, a ``weakref.finalize`` stops the session unless an explicit stop succeeded.
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from localsession.exceptions import TrainingSessionError

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The SDK's wording, verbatim (training_session/_submitter.py).
CLOSED_MESSAGE = (
    "This client is closed and accepts no new operations. Stopping or deleting "
    "the session closes its client, as does leaving the client's `with` block. "
    "Create a new client to continue."
)


class BackgroundSubmitter:
    """A client's submit gate. In-process submits run in the caller's thread."""

    def __init__(self, name: str = "localsession-submitter") -> None:
        self.name = name
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, fn: Callable[[], _T]) -> _T:
        with self._lock:
            if self._closed:
                raise TrainingSessionError(CLOSED_MESSAGE)
        return fn()

    def close(self, timeout: float = 5.0) -> None:
        """Idempotent; later submits raise. ``timeout`` is accepted for the SDK's contract."""
        with self._lock:
            self._closed = True


_SESSION_GONE_CODES = frozenset({"ResourceNotFound", "ResourceNotFoundException"})


def _auto_stop(session_name: str, service_client: Any, explicit_stop_failed: list[bool]) -> None:
    """Finalizer: stop an unreferenced session that nobody stopped (SDK semantics)."""
    try:
        stopped = service_client._stop_session_if_active(session_name)
    except Exception as exc:  # noqa: BLE001 - best effort, as in the SDK
        code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
        if code not in _SESSION_GONE_CODES:
            logger.warning("Auto-stop of unreferenced training session %r failed.", session_name)
        return
    if stopped and not explicit_stop_failed:
        try:
            warnings.warn(
                f"training session {session_name!r} was not stopped explicitly; stopping it "
                "now. Use the client as a context manager, or call .stop(), to control when "
                "the session is released.",
                ResourceWarning,
                stacklevel=2,
            )
        except Exception:  # noqa: BLE001 - the warnings machinery may be torn down
            pass
        logger.info("Auto-stopped unreferenced training session %r", session_name)


class _SessionHandle:
    """Shared by every client of one session; stops it when the last referrer goes."""

    def __init__(self, session_name: str, service_client: Any = None) -> None:
        self.session_name = session_name
        self._explicit_stop_failed: list[bool] = []
        self._finalizer: weakref.finalize | None = None
        if service_client is not None:
            self._finalizer = weakref.finalize(
                self, _auto_stop, session_name, service_client, self._explicit_stop_failed
            )

    @property
    def auto_stop_armed(self) -> bool:
        return self._finalizer is not None and self._finalizer.alive

    def note_explicit_stop_failed(self) -> None:
        if not self._explicit_stop_failed:
            self._explicit_stop_failed.append(True)

    def disarm(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
