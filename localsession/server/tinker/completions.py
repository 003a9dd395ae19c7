"""Per-sampling-session completion queues: ``/api/v1/retrieve_futures`` and
``/api/v1/join_sampling_session``.

With ``sample_use_retrieve_futures`` in the client config, a ``SamplingClient`` runs one
background poller per (sampling session, clone) that long-polls ``retrieve_futures`` for
the request ids that finished, and only then fetches each result with ``retrieve_future``.
Each ``asample`` here registers its runtime op; when the op is terminal its request id is
appended to the queue of ``(sampling_session_id, seq_id // 10**9)`` (the SDK puts a clone's
id in its seq_ids' billions) under the next cursor. A poll answers the events after its
``prev_cursor`` (older ones are trimmed, being seen), holds up to :data:`HOLD_SECONDS` when
there are none (``timeout=0`` answers at once), and forgets the futures the client lists as
retrieved.

With ``sample_join_sampling_session``, an unpickled ``SamplingClient`` asks
``join_sampling_session`` for its clone id before its first sample: 1, 2, ... per sampling
session (the original client is 0), so clones never share a queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localsession import vocab
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.server.tinker.dialect import Dialect

#: The longest a retrieve_futures poll is held with nothing to report (the SDK's HTTP
#: timeout for one poll is 45 s).
HOLD_SECONDS = 30.0
#: A clone's seq_ids start at clone id times this (the SDK's numbering).
CLONE_BLOCK = 1_000_000_000
Handler = Callable[[Request], Awaitable[Response]]
Key = tuple[str, int]


@dataclass
class Queue:
    """One (sampling session, clone)'s finished requests, in cursor order."""

    events: list[tuple[int, str, str]] = field(default_factory=list)  # (cursor, id, state)
    cursor: int = 0
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(
        default_factory=list
    )


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Completions:
    """The dialect's completion queues and clone counters (thread-safe)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.lock = threading.Lock()
        self.queues: dict[Key, Queue] = {}
        self.clones: dict[str, int] = {}  # sampling session id -> highest clone id handed out

    def _queue(self, key: Key) -> Queue:
        found = self.queues.get(key)
        if found is None:
            found = self.queues[key] = Queue()
        return found

    def watch(self, sampler_id: str, seq_id: Any, request_id: str, name: str, op: str) -> None:
        """Append ``request_id`` to its queue once the runtime op ``op`` on session ``name``
        is terminal (``finished``, or ``failed`` when it did not complete)."""
        key = (sampler_id, int(seq_id or 0) // CLONE_BLOCK)
        service = self.dialect.service

        def done() -> None:
            try:
                status = service.operation_outcome(name, op).status
            except ServiceError:
                status = None  # the fetch that follows reports what went wrong
            state = "finished" if status in (vocab.OpStatus.COMPLETED, None) else "failed"
            with self.lock:
                queue = self._queue(key)
                queue.cursor += 1
                queue.events.append((queue.cursor, request_id, state))
                waiters, queue.waiters = queue.waiters, []
            for owner, waiter in waiters:
                with contextlib.suppress(RuntimeError):  # that poll's loop is gone
                    owner.call_soon_threadsafe(_settle, waiter)

        service.on_operation_done(name, op, done)

    def join(self, sampler_id: str) -> int:
        self.dialect.sampling.sampler(sampler_id)  # 404 for an unknown sampling session
        with self.lock:
            counter = self.clones.get(sampler_id, 0) + 1
            self.clones[sampler_id] = counter
        return counter

    def _take(self, key: Key, prev: int) -> list[tuple[int, str, str]]:
        """Trim the events at or before ``prev``; the rest, oldest first."""
        with self.lock:
            queue = self._queue(key)
            queue.events = [e for e in queue.events if e[0] > prev]
            return list(queue.events)

    async def poll(self, body: dict[str, Any]) -> dict[str, Any]:
        """One retrieve_futures poll: the completions after ``prev_cursor`` and the cursor to
        send next, waiting up to the poll's ``timeout`` (capped at :data:`HOLD_SECONDS`)."""
        target = body.get("target") or {}
        if target.get("type", "sampling_session") != "sampling_session":
            raise errors.validation(f"retrieve_futures target type {target.get('type')!r}")
        sampler_id = str(target.get("sampling_session_id") or "")
        self.dialect.sampling.sampler(sampler_id)
        key = (sampler_id, int(target.get("cloned_sampler_id") or 0))
        prev = int(body.get("prev_cursor") or 0)
        done = {str(i) for i in body.get("retrieved_request_ids") or []}
        if done:
            for request_id in done:  # their results were read: drop the payloads
                self.dialect.futures.forget(request_id)
        timeout = body.get("timeout")
        hold = HOLD_SECONDS if timeout is None else min(max(float(timeout), 0.0), HOLD_SECONDS)
        events = self._take(key, prev)
        if not events and hold > 0:
            running = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = running.create_future()
            with self.lock:
                if any(e[0] > prev for e in self._queue(key).events):  # landed since _take
                    waiter.set_result(None)
                else:
                    self._queue(key).waiters.append((running, waiter))
            with contextlib.suppress(asyncio.TimeoutError):  # nothing yet: answer empty
                await asyncio.wait_for(waiter, hold)
            events = self._take(key, prev)
        completions = [{"state": state, "request_id": rid} for _, rid, state in events]
        return {"completions": completions, "cursor": events[-1][0] if events else prev}


def table(
    completions: Completions, read: Callable[[Request], Awaitable[dict[str, Any]]]
) -> list[tuple[str, Handler, str]]:
    """The two routes, for routes.py's table (``read`` parses a JSON body)."""

    async def retrieve_futures(request: Request) -> Response:
        return JSONResponse(await completions.poll(await read(request)))

    async def join_sampling_session(request: Request) -> Response:
        body = await read(request)
        counter = completions.join(str(body.get("sampling_session_id") or ""))
        return JSONResponse({"type": "join_sampling_session", "client_counter": counter})

    return [
        ("/retrieve_futures", retrieve_futures, "POST"),
        ("/join_sampling_session", join_sampling_session, "POST"),
    ]
