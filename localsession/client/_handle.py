"""Client lifetime: the ordered submitter a client closes, and the automatic stop of a session.

``BackgroundSubmitter`` sends a client's ops to the runtime in call order. While nothing is
backed up, a submit is made in the caller's thread: the runtime only queues the op, so this
is the fast path and keeps submission deterministic (the fakes rely on it). A submit refused
transiently (throttling, 5xx) must wait before its retry; it then moves to a worker thread,
and every later submit queues behind it until the backlog drains, so the caller returns at
once and sequence order is kept, as with the SDK's background submitter. Closing it makes
every later submit raise the SDK's "client is closed" ``TrainingSessionError``.

``_SessionHandle`` follows the SDK's contract (docs/wire.md#9): one per session,
shared by the training client, its derived sampling clients and their futures; when the last
of them is collected, a ``weakref.finalize`` stops the session unless an explicit stop
succeeded.
"""

from __future__ import annotations

import logging
import random
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from localsession import vocab
from localsession.exceptions import TrainingSessionError, is_retryable
from localsession.futures import DEFAULT_MAX_TRANSIENT_POLL_ERRORS, _jittered

_log = logging.getLogger("localsession.client")

#: The SDK's message for an op submitted to a closed client.
CLOSED_MESSAGE = (
    "This client is closed and accepts no new operations. Stopping or deleting the session "
    "closes its client, as does leaving the client's `with` block. Create a new client to "
    "continue."
)


class _Job:
    """One submit: ``send()`` makes one attempt; the outcome goes to ``future``."""

    def __init__(self, send: Callable[[], Any], backoff: Callable[[float], None]) -> None:
        self.send, self.backoff = send, backoff
        self.future: Future[Any] = Future()
        self.failures = 0

    def attempt(self) -> bool:
        """One try; True when the outcome is final (sent, or failed for good)."""
        try:
            self.future.set_result(self.send())
        except Exception as refusal:  # noqa: BLE001 - delivered through the future
            return self.refused(refusal)
        return True

    def refused(self, refusal: Exception) -> bool:
        """Count a refused try; True when that is final (the future then holds the error),
        False when it is tried again after a backoff."""
        self.failures += 1
        if is_retryable(refusal) and self.failures < DEFAULT_MAX_TRANSIENT_POLL_ERRORS:
            return False  # tried again after a backoff
        self.future.set_exception(refusal)
        return True


class BackgroundSubmitter:
    """Sends submits in order: inline while nothing waits, else through a worker thread."""

    def __init__(self, name: str = "localsession-submitter") -> None:
        self.name = name
        self._closed = False
        self._cond = threading.Condition()
        self._backlog: deque[_Job] = deque()
        self._worker: threading.Thread | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, attempt: Callable[[], Any], backoff: Callable[[float], None]) -> Any:
        """Submit with ``attempt()`` (retried after ``backoff(seconds)`` while refused
        transiently); returns at once. While nothing is backed up the attempt is made in the
        caller's thread, and its value is returned if it succeeds. Otherwise the return is a
        ``concurrent.futures.Future`` of the value, or of the refusal that was final (so
        ``attempt()`` must not itself return such a future)."""
        with self._cond:
            if self._closed:  # closing is final, as with the SDK's submitter
                raise TrainingSessionError(CLOSED_MESSAGE)
            if not self._backlog:
                try:
                    return attempt()
                except Exception as refusal:  # noqa: BLE001 - delivered through the future
                    job = _Job(attempt, backoff)
                    if job.refused(refusal):
                        return job.future
            else:
                job = _Job(attempt, backoff)
            self._backlog.append(job)
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name=self.name, daemon=True)
                self._worker.start()
        return job.future

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._backlog:
                    self._worker = None
                    self._cond.notify_all()
                    return
                job = self._backlog[0]
            if job.failures:
                job.backoff(_jittered(job.failures, random.uniform))
            if job.attempt():
                with self._cond:
                    self._backlog.popleft()

    def close(self, timeout: float = 5.0) -> None:
        """Refuse later submits and give queued ones up to ``timeout`` seconds to go out."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._worker is None, timeout)


def _auto_stop(session_name: str, service_client: Any, explicit_stop_failed: list[bool]) -> None:
    """Finalizer: stop an unreferenced session that nobody stopped (SDK semantics)."""
    try:
        did_stop = service_client._stop_session_if_active(session_name)
    except Exception as failure:  # noqa: BLE001 - best effort, as in the SDK
        reply = getattr(failure, "response", None) or {}
        # a session gone already: nothing to stop, nothing to warn about
        if reply.get("Error", {}).get("Code") not in vocab.NOT_FOUND_CODES:
            _log.warning("Auto-stop of unreferenced training session %r failed.", session_name)
        return
    if not did_stop or explicit_stop_failed:
        return
    notice = (
        f"training session {session_name!r} was not stopped explicitly; stopping it now. Use "
        "the client as a context manager, or call .stop(), to control when the session is "
        "released."
    )
    try:
        warnings.warn(notice, ResourceWarning, stacklevel=2)
    except Exception:  # noqa: BLE001 - the warnings machinery may be torn down at exit
        pass
    _log.info("Auto-stopped unreferenced training session %r", session_name)


class _SessionHandle:
    """Shared by every client of one session; stops it when the last referrer goes."""

    def __init__(self, session_name: str, service_client: Any = None) -> None:
        self.session_name: str = session_name
        # A list, not a flag: the finalizer holds this very object, never the handle.
        self._explicit_stop_failed: list[bool] = []
        self._finalizer: weakref.finalize | None = (
            None
            if service_client is None
            else weakref.finalize(
                self, _auto_stop, session_name, service_client, self._explicit_stop_failed
            )
        )

    def note_explicit_stop_failed(self) -> None:
        self._explicit_stop_failed[:] = [True]

    def disarm(self) -> None:
        finalizer = self._finalizer
        if finalizer is not None:
            finalizer.detach()
