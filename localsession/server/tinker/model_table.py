"""The Tinker models this server made, by model id: one owner with its own lock.

A Tinker *model* (``create_model``, or a create-via-load) is one runtime training session;
:class:`Model` keeps what the dialect maps onto it (its base model, rank, LoRA config, user
metadata) and its sequence-number offset (numbering.py). The dialect, numbering.py,
samplers.py, rest.py, dro.py and the console read and change the table through
:class:`ModelTable`'s methods, never a dict of it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Model:
    model_id: str
    session: str
    base_model: str
    rank: int
    lora: dict[str, Any]
    user_metadata: dict[str, Any] | None
    #: runtime sequence number = Tinker seq_id + offset (a create-via-load's load takes 1)
    offset: int = 0
    last_request: datetime = field(default_factory=_now)

    @property
    def owner(self) -> str:
        """The Tinker session that made it (a model id is ``<session id>:train:<n>``)."""
        return self.model_id.partition(":")[0]


class ModelTable:
    """Model id -> :class:`Model`, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, Model] = {}

    def add(self, model: Model) -> None:
        with self._lock:
            self._models[model.model_id] = model

    def get(self, model_id: str) -> Model | None:
        with self._lock:
            return self._models.get(model_id)

    def all(self) -> list[Model]:
        """Every model, in the order they were made."""
        with self._lock:
            return list(self._models.values())

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def of_session(self, session_id: str) -> list[Model]:
        """The models a Tinker session made."""
        with self._lock:
            return [m for m in self._models.values() if m.owner == session_id]

    def touch(self, model: Model) -> None:
        """Note a request on ``model`` now (``last_request_time``)."""
        with self._lock:
            model.last_request = _now()

    def shift(self, model: Model) -> None:
        """Number ``model``'s later requests one further on (a ``dro`` request's second op
        took the next runtime number)."""
        with self._lock:
            model.offset += 1
