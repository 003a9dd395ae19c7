"""Fixtures of the Tinker-surface suite: one ``tinker.ServiceClient`` per test, training and
sampling clients on the backend's base model, and token sequences in the model's own
tokens (backends/tinker.py reads them from its tokenizer).

Only the SDK's public clients and types are used, so the tests run unchanged against any
server that speaks the Tinker API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat
from conformance.suite_tinker._kit import text_tokens, wait


@pytest.fixture
def tinker_client(backend: Backend) -> Iterator[Any]:
    """A ``tinker.ServiceClient`` for one test, closed at its end (which ends the test's
    models, so a server with a small session limit can run the suite; an SDK before 0.27.2
    cannot close, and its sessions last until the server's heartbeat timeout)."""
    client = backend.service_client()
    yield client
    try:
        compat.end_session(client, backend.limits.op_timeout_s)
    except Exception:  # noqa: BLE001 - the server may already be gone at teardown
        pass


@pytest.fixture
def new_trainer(backend: Backend, tinker_client: Any) -> Callable[..., Any]:
    """A factory for LoRA training clients on the base model, waited for (keywords go to
    ``create_lora_training_client``; rank defaults to the backend's)."""

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("rank", backend.limits.rank)
        return wait(
            tinker_client.create_lora_training_client(backend.base_model, **kwargs), backend
        )

    return make


@pytest.fixture
def sampler(backend: Backend, tinker_client: Any) -> Any:
    """A sampling client on the base model (read-only: never trained)."""
    return wait(tinker_client.create_sampling_client(base_model=backend.base_model), backend)


@pytest.fixture
def tokens(backend: Backend) -> list[int]:
    """A short valid sequence: the backend's prompt and a continuation."""
    return text_tokens(backend)
