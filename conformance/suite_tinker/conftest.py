"""Fixtures of the Tinker-surface suite: one ``tinker.ServiceClient`` per test,
training clients on the backend's base model, and datums built from the backend's prompt.

Only the SDK's public clients and types are used, so the tests run unchanged against any
server that speaks the Tinker API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.adapter import Backend


@pytest.fixture
def tinker_client(backend: Backend) -> Iterator[Any]:
    """A ``tinker.ServiceClient`` for one test, closed at its end (which ends the test's
    models, so a server with a small session limit can run the suite)."""
    client = backend.service_client()
    yield client
    try:
        client.close("success").result(timeout=backend.limits.op_timeout_s)
    except Exception:  # noqa: BLE001 - the server may already be gone at teardown
        pass


@pytest.fixture
def new_trainer(backend: Backend, tinker_client: Any) -> Callable[..., Any]:
    """A factory for LoRA training clients on the base model (keywords go to
    ``create_lora_training_client``; rank defaults to the backend's)."""

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("rank", backend.limits.rank)
        return tinker_client.create_lora_training_client(backend.base_model, **kwargs)

    return make


@pytest.fixture
def tokens(backend: Backend) -> list[int]:
    """A short valid sequence: the backend's prompt followed by `` world`` in bytes."""
    return [*backend.prompt, 32, 119, 111, 114, 108, 100]
