"""The manual clock's gate: where a fake engine's training call waits for ``advance()``.

One gate per fake engine (so per session). In automatic mode it is open. In manual mode a
training call marks the gate ``waiting`` and blocks until :meth:`Gate.grant` lets exactly
one call through, or until the gate is opened (``set_manual(False)``, or the engine
closing). :class:`~fakes.fake_service.FakeService` decides when to grant (see ``advance``).
"""

from __future__ import annotations

import threading


class Gate:
    """Where a training call waits in manual-clock mode (open in automatic mode)."""

    def __init__(self, manual: bool = False) -> None:
        self._cond = threading.Condition()
        self._manual = manual
        self._permit = False
        #: A training call is waiting for the clock.
        self.waiting = False

    def pass_through(self) -> None:
        with self._cond:
            if not self._manual:
                return
            self.waiting = True
            self._cond.wait_for(lambda: self._permit or not self._manual)
            self._permit = False
            self.waiting = False

    def grant(self) -> None:
        """Let the waiting call through."""
        with self._cond:
            self._permit = True
            self._cond.notify_all()

    def set_manual(self, manual: bool) -> None:
        with self._cond:
            self._manual = manual
            self._cond.notify_all()
