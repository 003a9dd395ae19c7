"""Fixtures for the parity tests: an authenticated ``localsession serve`` upstream, the
recording proxy in front of it, and the SDK pointed at whichever of them a test names."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The launch post's GRPO loop (tests/mock/mock_blog.py), written against the SDK only.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mock"))

MAP = {"openai/gpt-oss-20b": "localsession/tiny"}
#: Planted credentials: none of them may reach a cassette.
UPSTREAM_KEY = "AKIAPLANTEDUPSTREAM7"
UPSTREAM_SECRET = "planted-upstream-secret-Zq81xW"
UPSTREAM_TOKEN = "planted-session-token-Hh62pL0"
CLIENT_KEY = "AKIAPLANTEDCLIENT042"
CLIENT_SECRET = "planted-client-secret-Rt55mN"


@dataclass
class Recording:
    """One recorded run: the cassette folder, the loop's results, what was signed."""

    out: Path
    seen: dict[str, Any]
    signatures: list[str] = field(default_factory=list)
    hf_cache: str = ""


def point_sdk(monkeypatch: pytest.MonkeyPatch, url: str, hf_cache: str) -> None:
    from localsession.server.runner import client_env

    for key, value in client_env(url, "us-west-2").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CLIENT_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CLIENT_SECRET)
    monkeypatch.setenv("HF_HUB_CACHE", hf_cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    """The GRPO loop of the unmodified SDK, recorded through ``localsession record`` in front
    of a ``localsession serve --auth`` that checks the proxy's new signatures. The server is
    stopped when this returns."""
    import mock_blog as blog

    from localsession.parity.proxy import user_credentials
    from localsession.parity.running import AppThread, RecordOptions, build_proxy
    from localsession.server.auth import Credential
    from localsession.server.runner import ServerThread
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
