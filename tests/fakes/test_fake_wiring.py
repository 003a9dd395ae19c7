"""One composition root: ``FakeService`` asks ``wiring.build_service(..., engine="fake")`` for
its service, as ``serve``, ``mock()`` and the in-process client ask it for theirs, and the
fake kind never falls back to the torch engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakes import FakeService
from localsession import wiring
from localsession.port import EngineSpec
from localsession.runtime.config import ServiceConfig


def test_fake_service_is_built_by_the_composition_root(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, Any]] = []
    real = wiring.build_service

    def spy(config: ServiceConfig | None = None, **kwargs: Any) -> Any:
        service = real(config, **kwargs)
        built.append((kwargs["engine"], service))
        return service

    monkeypatch.setattr(wiring, "build_service", spy)
    fake = FakeService(base_models=["fakes/a"])
    try:
        assert built == [("fake", fake.runtime)]
        assert fake.runtime.config.engine_factory is not wiring.default_engine_factory
        assert fake.runtime.list_base_models() == ["fakes/a"]  # only the names given
        with pytest.raises(ValueError, match="exports no tokenizers"):
            fake.runtime.catalog.export_tokenizer("fakes/a", Path("unused"))
    finally:
        fake.close()


def test_the_fake_kind_needs_its_engine_factory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="engine_factory"):
        wiring.build_service(ServiceConfig(home=tmp_path), engine="fake")


def test_the_fake_kinds_default_catalog_is_hermetic(tmp_path: Path) -> None:
    def factory(spec: EngineSpec) -> Any:
        raise AssertionError("no session is started here")

    service = wiring.build_service(
        ServiceConfig(home=tmp_path, engine_factory=factory), engine="fake"
    )
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
