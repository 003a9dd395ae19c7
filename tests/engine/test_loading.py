"""Loading each kind of resolved model (the catalog's rules are in tests/runtime/test_catalog.py):
the engine loads what the catalog resolved, and names the tokenizer after the model."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from localsession.engine.base_pool import load_private
from localsession.engine.builtin import save_builtin
from localsession.engine.loading import load_tokenizer
from localsession.port import EngineSpec, ResolvedModel
from localsession.runtime.models.catalog import LocalCatalog
from localsession.runtime.models.sources import shared_cache

from .conftest import OPTIONS


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``localsession/tiny`` written with save_pretrained (model + tokenizer)."""
    return save_builtin("localsession/tiny", tmp_path_factory.mktemp("tiny-dir"))


def _logits(loaded: Any, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([tokens])).logits


def _spec(catalog: LocalCatalog, name: str) -> EngineSpec:
    resolved = catalog.resolve(name)
    return EngineSpec(resolved.name, rank=4, alpha=8, model=resolved, options=OPTIONS)


def _same_as_tiny(loaded: Any, tiny_base: tuple[Any, Any], text: str) -> None:
    base_model, base_tok = tiny_base
    tokens = base_tok.encode(text)
    assert loaded.tokenizer.encode(text) == tokens
    with torch.no_grad():
        expected = base_model(input_ids=torch.tensor([tokens])).logits
    torch.testing.assert_close(_logits(loaded, tokens), expected, atol=1e-6, rtol=0)


def test_local_directory_loads_same_model(
    isolated_home: Path, saved_tiny: Path, tiny_base: tuple[Any, Any]
) -> None:
    catalog = LocalCatalog(isolated_home, model_map={"org/dir-model": str(saved_tiny)})
    loaded = load_private(_spec(catalog, "org/dir-model"))
    assert loaded.resolved.kind == "local"
    assert loaded.tokenizer.name_or_path == "org/dir-model"  # the model id, not the path
    _same_as_tiny(loaded, tiny_base, "same weights?")


def test_hf_cache_model_loads(
    monkeypatch: pytest.MonkeyPatch,
    isolated_home: Path,
    tmp_path: Path,
    saved_tiny: Path,
    tiny_base: tuple[Any, Any],
) -> None:
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in saved_tiny.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    loaded = load_private(_spec(LocalCatalog(isolated_home), "acme/tiny-llama"))
    assert loaded.tokenizer.name_or_path == "acme/tiny-llama"
    _same_as_tiny(loaded, tiny_base, "from the cache")


def test_builtin_tokenizer_is_named_after_the_model(isolated_home: Path) -> None:
    catalog = LocalCatalog(isolated_home, model_map={"openai/gpt-oss-20b": "localsession/tiny"})
    resolved = catalog.resolve("openai/gpt-oss-20b")
    assert load_tokenizer(resolved).name_or_path == "openai/gpt-oss-20b"
    assert load_tokenizer(catalog.resolve("localsession/tiny")).name_or_path == "localsession/tiny"


def test_gguf_is_converted_lazily_into_the_cache_root(
    monkeypatch: pytest.MonkeyPatch,
    isolated_home: Path,
    tmp_path: Path,
    saved_tiny: Path,
    tiny_base: tuple[Any, Any],
) -> None:
    """A "gguf" model goes through engine/gguf.py's ``ensure_converted(file, cache_root)``
    (stood in for here: this checks the call, not the conversion) and loads its output."""
    gguf = tmp_path / "weights" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 20)
    calls: list[tuple[Path, Path]] = []

    def ensure_converted(gguf_path: Path, cache_root: Path) -> Path:
        calls.append((gguf_path, cache_root))
        return saved_tiny

    module = types.ModuleType("localsession.engine.gguf")
    module.ensure_converted = ensure_converted  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "localsession.engine.gguf", module)
    catalog = LocalCatalog(isolated_home, model_map={"acme/from-gguf": str(gguf.parent)})
    loaded = load_private(_spec(catalog, "acme/from-gguf"))
    models = shared_cache() / "models"  # one machine-wide cache, not the home's
    assert calls and all(c == (gguf.resolve(), models) for c in calls)
    assert loaded.resolved == ResolvedModel(
        "acme/from-gguf", "local", str(saved_tiny), None, str(models)
    )
    assert loaded.tokenizer.name_or_path == "acme/from-gguf"
    _same_as_tiny(loaded, tiny_base, "converted")


def test_a_spec_without_a_resolved_model_is_refused_unless_builtin() -> None:
    with pytest.raises(ValueError, match="resolve the name through a model catalog"):
        load_private(EngineSpec("acme/tiny-llama", rank=4, alpha=8))
    loaded = load_private(EngineSpec("localsession/tiny", rank=2, alpha=4, options=OPTIONS))
    assert loaded.resolved == ResolvedModel("localsession/tiny", "builtin", "localsession/tiny")
