"""The sampler table: sampling sessions by id, and the hidden sampler sessions (one per base
model and head) with their makers' locks and last use. One owner with its own lock.

samplers.py decides which weights a sampler reads and which runtime session runs it; this
module only keeps the table, so the dialect (session end), expiry.py (reclaiming an idle
hidden session) and the console read and change it through these methods, never its dicts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    package: str | None
    model_id: str | None
    #: the package adapts the output head (train_unembed): only a session that does reads it
    unembed: bool = False
    #: the Tinker session that made it (None: a sample request that named no session)
    session_id: str | None = None

    @property
    def key(self) -> str:
        """The hidden sampler session this sampler runs on when its model is gone."""
        return self.base_model + (" +unembed" if self.unembed else "")


class SamplerTable:
    """Sampler id -> :class:`Sampler`; hidden key -> runtime session, maker lock, last use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samplers: dict[str, Sampler] = {}
        self._hidden: dict[str, str] = {}  # hidden key -> sampler session name
        self._makers: dict[str, threading.Lock] = {}  # held while a key's session is made
        self._used: dict[str, float] = {}  # hidden key -> last request (time.monotonic)

    # -- samplers ------------------------------------------------------------------------

    def add(self, sampler: Sampler) -> None:
        with self._lock:
            self._samplers[sampler.sampler_id] = sampler

    def get(self, sampler_id: str) -> Sampler | None:
        with self._lock:
            return self._samplers.get(sampler_id)

    def all(self) -> list[Sampler]:
        with self._lock:
            return list(self._samplers.values())

    def drop_session(self, session_id: str) -> None:
        """Forget the samplers a Tinker session made (it ended)."""
        with self._lock:
            for sampler_id in [k for k, v in self._samplers.items() if v.session_id == session_id]:
                del self._samplers[sampler_id]

    # -- hidden sampler sessions ---------------------------------------------------------

    def maker(self, key: str) -> threading.Lock:
        """The lock one maker of ``key``'s hidden session holds (the others wait on it)."""
        with self._lock:
            return self._makers.setdefault(key, threading.Lock())

    def use(self, key: str) -> str | None:
        """Note a request on ``key``'s hidden session now; its name, if it has one."""
        with self._lock:
            self._used[key] = time.monotonic()
            return self._hidden.get(key)

    def set_hidden(self, key: str, name: str) -> None:
        with self._lock:
            self._hidden[key] = name
            self._used[key] = time.monotonic()

    def drop_hidden(self, key: str, name: str) -> None:
        """Forget ``key``'s hidden session if it is still ``name`` (its start failed)."""
        with self._lock:
            if self._hidden.get(key) == name:
                del self._hidden[key]

    def hidden(self) -> dict[str, str]:
        """Hidden key -> session name, a copy."""
        with self._lock:
            return dict(self._hidden)

    def reclaim(self, live: set[str], now: float, timeout: float) -> tuple[list[str], bool]:
        """Forget the hidden sessions no ``live`` Tinker session holds a sampler on and that
        ran nothing for ``timeout`` seconds before ``now``; their names, and whether any
        hidden session is left."""
        with self._lock:
            held = {s.key for s in self._samplers.values() if s.session_id in live}
            idle = [
                key
                for key in self._hidden
                if key not in held and now - self._used.get(key, 0.0) > timeout
            ]
            names = [self._hidden.pop(key) for key in idle]
            return names, bool(self._hidden)
