"""Shared test setup: offline Hugging Face, and one in-process service per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# ServiceClient needs a region, as the SDK does; the tests run where none is configured.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")

import pytest  # noqa: E402

from localsession import ServiceClient  # noqa: E402
from localsession.runtime.service import Service, ServiceConfig  # noqa: E402

ROLE = "arn:aws:iam::000000000000:role/localsession-tests"


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for the whole run (sessions share it, as on the real service)."""
    home = tmp_path_factory.mktemp("localsession-home")
    svc = Service(ServiceConfig(max_sessions=64, gap_timeout=0.0, home=home))
    yield svc
    svc.close()


@pytest.fixture
def client(service: Service) -> ServiceClient:
    return ServiceClient(role_arn=ROLE, backend=service)


@pytest.fixture
def relaxed(service: Service) -> ServiceClient:
    return ServiceClient(role_arn=ROLE, backend=service, strict=False)
