"""A server on port 0 over a fresh home (``testkit.running_server``), and the unmodified SDK
pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from testkit import running_server

from localsession import ServiceClient as LocalServiceClient
from localsession import TrainingClient
from localsession.server.endpoints import client_env

from .common import GROUP, REGION, ROLE, S3, Running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A strict server (every service limit on), as users run it by default."""
    home = tmp_path_factory.mktemp("server-home")
    with running_server(home, long_poll=5.0, max_sessions=8, gap_timeout=1.0) as served:
        yield served


@pytest.fixture(scope="module")
def session(server: Running) -> Iterator[TrainingClient]:
    """A rank-4 ``localsession/tiny`` session on ``server``, made in-process (the tests then
    reach it over the wire by name)."""
    local = LocalServiceClient(
        role_arn=ROLE, backend=server.service, model_package_group_arn=GROUP, strict=False
    )
    with local.create_lora_training_client("localsession/tiny", rank=4) as tc:
        yield tc


@pytest.fixture
def sdk_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[Running], None]:
    """Point the process's AWS environment at a server (undone after the test)."""

    def point(running: Running) -> None:
        for key, value in client_env(running.url, REGION).items():
            monkeypatch.setenv(key, value)

    return point


@pytest.fixture
def sdk(server: Running, sdk_env: Callable[[Running], None]) -> Any:
    """The real SDK's ServiceClient, talking to ``server``."""
    from sagemaker.train.training_session import ServiceClient

    sdk_env(server)
    return ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
