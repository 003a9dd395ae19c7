"""pytest fixtures for loops under test: ``pytest -p fakes.pytest_plugin`` (or list
``fakes.pytest_plugin`` in ``pytest_plugins``).

- ``fake_service``: a fresh :class:`~fakes.FakeServiceClient` per test (automatic clock),
  closed afterwards; mark a test ``@pytest.mark.fake_manual`` for the manual clock.
- ``fake_training_client``: a training client on it (base model ``"fakes/bigram"``, rank 8).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakes.client import FakeServiceClient

BASE_MODEL = "fakes/bigram"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fake_manual: run fake_service with the manual clock")


@pytest.fixture
def fake_service(request: pytest.FixtureRequest) -> Iterator[FakeServiceClient]:
    manual = request.node.get_closest_marker("fake_manual") is not None
    with FakeServiceClient(manual=manual) as fake:
        yield fake


@pytest.fixture
def fake_training_client(fake_service: FakeServiceClient) -> Iterator[Any]:
    client = fake_service.create_lora_training_client(BASE_MODEL, rank=8)
    yield client
    client.stop()
