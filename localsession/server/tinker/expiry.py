"""Tinker sessions as the service keeps them: expired when their heartbeats stop.

The SDK heartbeats each session every 10 s and, after 120 s without an answer, warns that
the session will be terminated. Here a session none of whose heartbeats or requests arrived
for ``ServiceConfig.heartbeat_timeout`` seconds (``serve --heartbeat-timeout``, default 120;
0 = never) is expired as ``close()`` would end it: its models' runtime sessions stop, its
samplers are forgotten, and a late heartbeat gets 410. A hidden sampler session
(samplers.py) that no live session holds a sampler on and that ran nothing for that long is
stopped too.

One daemon thread per dialect sweeps while there is something to expire, and ends when
there is nothing left (the next session or hidden sampler starts it again), when the
dialect is collected, or when the setting is 0.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol

from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service
from localsession.server.tinker.heartbeats import Heartbeats
from localsession.server.tinker.sampler_table import SamplerTable


class Dialect(Protocol):
    """What expiry reads of the dialect (dialect.py, which imports this module)."""

    service: Service
    heartbeats: Heartbeats
    samplers: SamplerTable

    def end_session(self, session_id: str) -> None: ...


#: The longest and the shortest wait between two sweeps (a short timeout sweeps at a
#: quarter of it).
MAX_PERIOD_S = 5.0
MIN_PERIOD_S = 0.05


def period(timeout: float) -> float:
    """Seconds between sweeps for ``timeout``: an expiry is late by at most this."""
    return max(MIN_PERIOD_S, min(MAX_PERIOD_S, timeout / 4))


def sweep(dialect: Dialect, now: float) -> bool:
    """Expire what is due at ``now`` (time.monotonic); whether anything is left to watch."""
    timeout = dialect.service.config.heartbeat_timeout
    if timeout <= 0:
        return False
    for session_id in dialect.heartbeats.due(now, timeout):
        dialect.end_session(session_id)
    live = set(dialect.heartbeats.live())
    idle, hidden_left = dialect.samplers.reclaim(live, now, timeout)
    for name in idle:
        stop(dialect, name)
    return bool(live) or hidden_left


def stop(dialect: Dialect, name: str) -> None:
    """Stop one runtime session; one already stopping or gone is left as it is."""
    try:
        dialect.service.control.stop(name)
    except ServiceError:
        pass


class Reaper:
    """The sweeping thread of one dialect (held weakly, so the dialect can be collected)."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = weakref.ref(dialect)
        self._guard = threading.Lock()
        self._watcher: threading.Thread | None = None

    def ensure(self) -> None:
        """Start the thread unless it runs (called when a session or hidden sampler appears)."""
        dialect = self._dialect()
        if dialect is None or dialect.service.config.heartbeat_timeout <= 0:
            return
        with self._guard:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._watcher = threading.Thread(
                target=self._run, name="localsession-tinker-expiry", daemon=True
            )
            self._watcher.start()

    def _run(self) -> None:
        pause = threading.Event()
        while True:
            dialect = self._dialect()
            if dialect is None:
                return
            with self._guard:
                if not sweep(dialect, time.monotonic()):
                    self._watcher = None
                    return
            wait = period(dialect.service.config.heartbeat_timeout)
            del dialect  # not held across the wait
            pause.wait(wait)
