"""``result(timeout=0.5)`` on a long op, through the unmodified SDK over HTTP, raises within
3.5 s (issues 16 and 28), on both paths of docs/wire.md#6: the submit's answer held (the SDK
waits for it on a future that honours the timeout exactly), and the submit answered at once
(the SDK's poll is held for at most the default long-poll, then it sleeps its 2 s interval
and sees the deadline passed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from localsession.port import AdamHyperparams
from localsession.port_results import OptimResult
from localsession.runtime.service import ServiceConfig
from localsession.server.app import SUBMIT_HOLD_SECONDS
from localsession.server.endpoints import client_env
from localsession.server.runner import ServerThread
from localsession.wiring import build_service, default_engine_factory

ROLE = "arn:aws:iam::123456789012:role/differential"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/differential"
S3 = "s3://differential-bucket/out"
SLOW_OP_S = 8.0


class _SlowOptimizer:
    """A real engine whose optimizer step takes ``SLOW_OP_S`` (cut short at teardown)."""

    def __init__(self, engine: Any, release: threading.Event) -> None:
        self._engine, self._release = engine, release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        self._release.wait(SLOW_OP_S)
        return self._engine.optim_step(adam_params)  # type: ignore[no-any-return]


@pytest.fixture(params=[SUBMIT_HOLD_SECONDS, 0.0], ids=["submit-held", "poll-held"])
def slow_server(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[threading.Event]:
    release = threading.Event()
    config = ServiceConfig(
        home=tmp_path,
        engine_factory=lambda spec: _SlowOptimizer(default_engine_factory(spec), release),
    )
    service = build_service(config)
    # the default long-poll hold, as `serve` uses it
    with ServerThread(service, submit_hold=request.param) as url:
        for key, value in client_env(url, "us-west-2").items():
            monkeypatch.setenv(key, value)
        yield release
        release.set()
    service.close()


def test_result_timeout_over_the_wire_is_bounded(slow_server: threading.Event) -> None:
    from sagemaker.train.training_session import AdamParams, ServiceClient

    sdk = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
    with sdk.create_lora_training_client(base_model="localsession-tiny", rank=8) as tc:
        future = tc.optim_step(AdamParams(learning_rate=1e-3))
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            future.result(timeout=0.5)
        waited = time.monotonic() - started
        assert waited < 3.5, f"result(timeout=0.5) took {waited:.2f}s"
        assert not future.done()
        slow_server.set()  # let the op finish now instead of after 8 s
        assert future.result(timeout=30) is not None
