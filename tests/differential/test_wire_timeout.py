"""``result(timeout=0.5)`` on a long op, through the unmodified SDK over HTTP, raises
TimeoutError while the op is still running (issues 16 and 28), on both paths of
docs/wire.md#6: the submit's answer held (the SDK waits for it on a future that honours the
timeout exactly), and the submit answered at once (the SDK's poll is held for at most the
default long-poll, then it sleeps its 2 s interval and sees the deadline passed).

No clock is read: the op is held until the test releases it, so a TimeoutError that
arrives at all arrived before the op ended (a wait for the op itself would last until the
hold's bound, sized for a loaded machine, and then return a result instead)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from localsession.port import AdamHyperparams
from localsession.port_results import OptimResult
from localsession.runtime.service import ServiceConfig
from localsession.server.app import SUBMIT_HOLD_SECONDS
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import build_service, default_engine_factory

ROLE = "arn:aws:iam::123456789012:role/differential"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/differential"
S3 = "s3://differential-bucket/out"
#: The longest an optimizer step is held: only a bound on a test that would otherwise hang.
HOLD_S = 600.0


class _SlowOptimizer:
    """A real engine whose optimizer step waits for ``release`` (at most ``HOLD_S``)."""

    def __init__(self, engine: Any, release: threading.Event) -> None:
        self._engine, self._release = engine, release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        self._release.wait(HOLD_S)
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
        with pytest.raises(TimeoutError):
            future.result(timeout=0.5)
        assert not slow_server.is_set()  # the op is still held: the wait ended without it
        assert not future.done()
        slow_server.set()  # let the op finish
        assert future.result(timeout=30) is not None
