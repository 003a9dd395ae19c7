"""Shared fixtures for the mock's tests: a socket guard and a `localsession serve` to compare."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mock_support import no_sockets


@pytest.fixture
def socket_guard() -> Iterator[None]:
    """No socket may connect for the whole test."""
    with no_sockets():
        yield


@pytest.fixture
def serve_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """Run ``fn`` against a real ``localsession serve`` (uvicorn on port 0, built exactly as the
    CLI builds it), with the SDK pointed at it through the printed exports."""
    from huggingface_hub import constants as hf_constants

    from localsession.server.hosting import ServerThread
    from localsession.server.serve import ServeOptions, build_service, serve_exports

    def run(fn: Callable[[], Any], model_map: dict[str, str], strict: bool = True) -> Any:
        with monkeypatch.context() as patch:
            patch.setenv("LOCALSESSION_MODEL_MAP", "")
            options = ServeOptions(
                home=tmp_path / "serve-home",
                relaxed=not strict,
                model_map=[f"{k}={v}" for k, v in model_map.items()],
            )
            service = build_service(options)
            try:
                with ServerThread(service, long_poll=options.long_poll) as url:
                    exports = serve_exports(url, service)
                    for key, value in exports.items():
                        patch.setenv(key, value)
                    # A user's shell has the exports before Python starts; this process
                    # imported huggingface_hub already, so its copy of the cache path follows.
                    patch.setattr(hf_constants, "HF_HUB_CACHE", exports["HF_HUB_CACHE"])
                    return fn()
            finally:
                service.close()

    return run
