"""Fixtures for the parity tests: an authenticated ``localsession serve`` upstream, the
recording proxy in front of it, and the SDK pointed at whichever of them a test names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from parity_support import (
    MAP,
    UPSTREAM_KEY,
    UPSTREAM_SECRET,
    UPSTREAM_TOKEN,
    Recording,
    point_sdk,
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    """The GRPO loop of the unmodified SDK, recorded through ``localsession record`` in front
    of a ``localsession serve --auth`` that checks the proxy's new signatures. The server is
    stopped when this returns."""
    import mock_blog as blog

    from localsession.parity.proxy import user_credentials
    from localsession.parity.running import RecordOptions, build_proxy
    from localsession.server.auth import Credential
    from localsession.server.hosting import AppThread, ServerThread
    from localsession.server.serve import ServeOptions, build_service, serve_exports

    root = tmp_path_factory.mktemp("parity")
    out = root / "cassettes"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCALSESSION_MODEL_MAP", "")
        options = ServeOptions(home=root / "home", model_map=[f"{k}={v}" for k, v in MAP.items()])
        service = build_service(options)
        credential = Credential(UPSTREAM_KEY, UPSTREAM_SECRET)
        # The user's credentials, found by botocore's own chain (here: the environment).
        patch.setenv("AWS_ACCESS_KEY_ID", UPSTREAM_KEY)
        patch.setenv("AWS_SECRET_ACCESS_KEY", UPSTREAM_SECRET)
        patch.setenv("AWS_SESSION_TOKEN", UPSTREAM_TOKEN)
        patch.delenv("AWS_PROFILE", raising=False)
        credentials = user_credentials()
        patch.delenv("AWS_SESSION_TOKEN")
        try:
            with ServerThread(service, long_poll=5.0, credential=credential) as upstream:
                proxy = build_proxy(RecordOptions(upstream=upstream, out=out), credentials)
                signatures: list[str] = []
                sign = proxy._sign

                def spy(*args: Any) -> dict[str, str]:
                    headers = sign(*args)
                    signatures.append(headers["Authorization"].rsplit("Signature=", 1)[1])
                    return headers

                proxy._sign = spy  # type: ignore[method-assign]
                hf_cache = serve_exports(upstream, service)["HF_HUB_CACHE"]
                try:
                    with AppThread(proxy.app()) as url:
                        point_sdk(patch, url, hf_cache)
                        seen = blog.grpo("openai/gpt-oss-20b", steps=2, group=2, concurrent=False)
                finally:
                    proxy.close()
        finally:
            service.close()
    yield Recording(out, seen, signatures, hf_cache)


@pytest.fixture
def sdk_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], None]:
    def point(url: str, hf_cache: str) -> None:
        point_sdk(monkeypatch, url, hf_cache)

    return point
