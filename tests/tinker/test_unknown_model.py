"""An unknown ``base_model`` through the unmodified tinker SDK, against a server configured as
``serve`` configures it: refused with a 400 in Tinker words, naming the served models and the
``--model-map`` option (not the SageMaker dialect's ``ModelConfig.BaseModelArn``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localsession.mocking.hooks import scoped_environ
from localsession.server.hosting import ServerThread
from localsession.server.serve import ServeOptions, build_service

tinker = pytest.importorskip("tinker")

UNKNOWN = "Qwen/Qwen3-8B"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[Any, list[str]]]:
    service = build_service(ServeOptions(home=tmp_path), tmp_path)  # serve's profile
    environment = {"TINKER_API_KEY": "tml-localsession", "HF_HUB_OFFLINE": "1"}
    try:
        with ServerThread(service) as url, scoped_environ({"TINKER_BASE_URL": url, **environment}):
            yield tinker.ServiceClient(), service.list_base_models()
    finally:
        service.close()


def _check(exc: Any, served: list[str]) -> None:
    assert exc.status_code == 400
    detail = exc.body["detail"]
    assert f"base_model {UNKNOWN!r} is not served here" in detail
    assert "Served models: " + ", ".join(served) in detail
    assert f"localsession serve --model-map {UNKNOWN}=TARGET" in detail
    assert "BaseModelArn" not in detail and "ListHubContents" not in detail


def test_an_unknown_model_for_training_names_the_served_ones(client: Any) -> None:
    sc, served = client
    assert {"localsession/tiny", "localsession/small"} <= set(served)
    with pytest.raises(tinker.BadRequestError) as info:
        sc.create_lora_training_client(base_model=UNKNOWN, rank=4).result()
    _check(info.value, served)
    capabilities = tinker.RestClient().get_server_capabilities().result()
    names = {m.model_name for m in capabilities.supported_models}
    assert names == set(served)  # the list the message points at


def test_an_unknown_model_for_sampling_names_the_served_ones(client: Any) -> None:
    sc, served = client
    with pytest.raises(tinker.BadRequestError) as info:
        sc.create_sampling_client(base_model=UNKNOWN).result()
    _check(info.value, served)
