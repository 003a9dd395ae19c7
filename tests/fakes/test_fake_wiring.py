"""One composition root: ``FakeService`` asks the wiring's ``fake_service`` profile for its
service, as ``serve`` and ``mock()`` ask ``server_service`` and the in-process client asks
``inprocess_service``, and the fakes' profile never falls back to the torch engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakes import FakeService
from localsession import wiring
from localsession.port import EngineSpec


def test_fake_service_is_built_by_the_fake_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    real = wiring.fake_service

    def spy(*args: Any, **kwargs: Any) -> Any:
        service = real(*args, **kwargs)
        built.append(service)
        return service

    monkeypatch.setattr(wiring, "fake_service", spy)
    fake = FakeService(base_models=["fakes/a"])
    try:
        assert built == [fake.runtime]
        assert fake.runtime.config.engine_factory is not wiring.default_engine_factory
        assert fake.runtime.list_base_models() == ["fakes/a"]  # only the names given
        with pytest.raises(ValueError, match="exports no tokenizers"):
            fake.runtime.catalog.export_tokenizer("fakes/a", Path("unused"))
    finally:
        fake.close()


def test_the_fake_profiles_default_catalog_is_hermetic(tmp_path: Path) -> None:
    def factory(spec: EngineSpec) -> Any:
        raise AssertionError("no session is started here")

    service = wiring.fake_service(factory, home=tmp_path)
    try:
        assert service.config.engine_factory is factory
        resolved = service.catalog.resolve("any/name-at-all")
        assert (resolved.name, resolved.kind, resolved.target) == (
            "any/name-at-all",
            "builtin",
            "any/name-at-all",
        )
    finally:
        service.close()
