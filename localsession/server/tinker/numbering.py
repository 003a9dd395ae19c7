"""Sequence numbers of a Tinker model's requests: the Dialect's :class:`Numbering`, over its
model table (model_table.py).

The SDK numbers every request of a model (``seq_id``); the runtime's number is that plus
the model's offset (a create-via-load's first op, a ``dro`` request's second op). A request
refused before or by its submit still tells the runtime its number was used
(``Service.refuse_sequence``), so the requests numbered after it run at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Protocol

from localsession import vocab
from localsession.port_commands import TrainingCommand
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service
from localsession.server.tinker.model_table import ModelTable


class NumberedModel(Protocol):
    """What numbering reads of a Tinker model: its runtime session and number offset."""

    session: str
    offset: int


class Numbering:
    """Number, submit and refuse a model's requests."""

    def __init__(self, service: Service, models: ModelTable) -> None:
        self.service = service
        self.models = models

    def number(self, model: NumberedModel, seq_id: Any) -> int:
        """The runtime sequence number of the SDK's ``seq_id`` on ``model``."""
        if seq_id is not None and type(seq_id) is not int:
            raise errors.validation(f"seq_id={seq_id!r} must be an integer >= 1")
        number = (seq_id or 0) + model.offset
        if number < 1:
            raise errors.validation(f"seq_id={seq_id} must be >= 1")
        return number

    @contextmanager
    def numbered(self, model: NumberedModel, seq_id: Any) -> Iterator[int]:
        """The request's runtime sequence number; a refusal raised inside (before or by the
        submit) records the number used, so later requests do not wait for it."""
        number = self.number(model, seq_id)
        try:
            yield number
        except ServiceError as exc:
            if exc.http_status < 500 and exc.code != vocab.ErrorCode.THROTTLING:
                self._refuse(model.session, number)
            raise

    def refuse(self, model_id: Any, seq_id: Any) -> None:
        """A route refused a model's request before the dialect saw it: free its number
        (nothing to do for an unknown model or a missing number)."""
        model = self.models.get(str(model_id))
        if model is not None and seq_id is not None:
            with suppress(ServiceError):  # a bad seq_id: nothing was numbered
                self._refuse(model.session, self.number(model, seq_id))

    def _refuse(self, session: str, number: int) -> None:
        with suppress(ServiceError):  # the session is gone: nothing waits on it
            self.service.refuse_sequence(session, number)

    def submit(self, model: NumberedModel, number: int, command: TrainingCommand) -> str:
        """Queue one typed runtime training command for ``model``; the runtime op id."""
        return self.service.submit_training(
            model.session, number, command, client_token=f"tinker-{number}"
        )
