"""``serve``'s tokenizer warm-up (server/warmup.py): until every listed model's tokenizer is
in the server's HF cache, the Tinker requests after which a client loads one are answered
503 + Retry-After, which the unmodified tinker SDK retries; then the client is served, its
``get_tokenizer()`` works offline, and the ready line names the models."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from localsession.mocking.hooks import scoped_environ
from localsession.server.app import create_app
from localsession.server.hosting import AppThread
from localsession.server.serve import ServeOptions, build_service
from localsession.server.warmup import RETRY_AFTER_S, TOKENIZER_ROUTES, TokenizerWarmup


class BuiltinsOnly:
    """The server's catalog listing only the built-in models: their tokenizers export in
    milliseconds, where a cold GGUF conversion takes seconds to a minute on a busy box."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def names(self) -> list[str]:
        return [n for n in self._catalog.names() if n.startswith("localsession/")]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


def test_a_tokenizer_route_waits_for_the_export_and_the_rest_do_not(tmp_path: Path) -> None:
    service = build_service(ServeOptions(home=tmp_path), tmp_path)
    catalog = BuiltinsOnly(service.catalog)
    warmup = TokenizerWarmup(catalog, service.hub_cache, hold_s=0.0)  # type: ignore[arg-type]
    try:
        with AppThread(warmup.guard(create_app(service))) as url:
            request = urllib.request.Request(
                url + "/api/v1/create_model", data=b"{}", method="POST"
            )
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(request, timeout=30)
            assert info.value.code == 503
            assert info.value.headers["Retry-After"] == str(RETRY_AFTER_S)
            assert "exporting its models' tokenizers" in json.loads(info.value.read())["detail"]
            with urllib.request.urlopen(url + "/api/v1/healthz", timeout=30) as health:
                assert health.status == 200  # not a tokenizer route: served at once
            lines: list[str] = []
            warmup.run(lines.append)
            with pytest.raises(urllib.error.HTTPError) as after:
                urllib.request.urlopen(request, timeout=30)
            assert after.value.code == 400  # now the route itself answers (no base_model)
    finally:
        service.close()
    assert len(lines) == 1 and lines[0].startswith("# ready: tokenizers of ")
    assert "localsession/tiny" in lines[0]
    for name in warmup.catalog.names():  # every listed model's tokenizer is in the cache
        repo = service.hub_cache / ("models--" + name.replace("/", "--"))
        assert any(repo.glob("snapshots/*/tokenizer_config.json")), name


@pytest.mark.integration
def test_the_tinker_sdk_retries_until_the_tokenizers_are_ready(tmp_path: Path) -> None:
    tinker = pytest.importorskip("tinker")
    service = build_service(ServeOptions(home=tmp_path), tmp_path)
    catalog = BuiltinsOnly(service.catalog)
    warmup = TokenizerWarmup(catalog, service.hub_cache, hold_s=0.0)  # type: ignore[arg-type]
    guarded = warmup.guard(create_app(service))
    answers: list[tuple[str, int]] = []
    lines: list[str] = []

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        async def record(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and scope["path"] in TOKENIZER_ROUTES:
                answers.append((scope["path"], message["status"]))
                if message["status"] == 503 and len(answers) == 1:
                    warmup.start(lines.append)  # the export begins once a client was refused
            await send(message)

        await guarded(scope, receive, record)

    environment = {
        "TINKER_API_KEY": "tml-localsession",
        "HF_HUB_CACHE": str(service.hub_cache.resolve()),
        "HF_HUB_OFFLINE": "1",
    }
    try:
        with AppThread(app) as url, scoped_environ({"TINKER_BASE_URL": url, **environment}):
            client = tinker.ServiceClient()
            tc = client.create_lora_training_client(base_model="localsession/tiny", rank=4)
            tokenizer = tc.result().get_tokenizer()
            assert tokenizer.decode(tokenizer.encode("hello", add_special_tokens=False)) == "hello"
            client.close("success").result()
    finally:
        service.close()
    assert answers[0] == ("/api/v1/create_model", 503)
    assert ("/api/v1/create_model", 200) in answers
    assert warmup.ready.is_set() and len(lines) == 1


def test_a_request_held_while_the_export_finishes_is_served(tmp_path: Path) -> None:
    """Within the hold, the export's end lets the waiting request through: no 503 at all."""
    service = build_service(ServeOptions(home=tmp_path), tmp_path)
    catalog = BuiltinsOnly(service.catalog)
    warmup = TokenizerWarmup(catalog, service.hub_cache, hold_s=60.0)  # type: ignore[arg-type]
    lines: list[str] = []
    try:
        with AppThread(warmup.guard(create_app(service))) as url:
            request = urllib.request.Request(url + "/api/v1/get_info", data=b"{}", method="POST")
            threading.Timer(0.5, warmup.run, args=(lines.append,)).start()
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(request, timeout=120)
            assert warmup.ready.is_set()
            assert info.value.code != 503  # the route's own answer (no such model)
    finally:
        service.close()
    assert len(lines) == 1


def test_the_ready_line_comes_after_the_export_even_when_one_model_fails(tmp_path: Path) -> None:
    class Broken:
        def names(self) -> list[str]:
            return ["x/broken"]

        def canonical_name(self, name: str) -> str:
            raise ValueError("no such model")

        def resolve(self, name: str) -> Any:
            raise ValueError("no such model")

    warmup = TokenizerWarmup(Broken(), tmp_path)  # type: ignore[arg-type]
    lines: list[str] = []
    warmup.start(lines.append).join(30)
    assert warmup.ready.is_set() and lines[0].startswith("# ready: tokenizers of x/broken")
