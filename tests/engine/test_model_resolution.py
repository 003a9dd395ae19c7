"""Base-model name resolution (``localsession.runtime.models``) and loading each kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from localsession.engine.builtin import save_builtin
from localsession.engine.model import load_model
from localsession.runtime.engine_api import EngineSpec
from localsession.runtime.models import (
    BUILTIN_MODELS,
    ResolvedModel,
    list_base_models,
    resolve_base_model,
)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No map, an empty LOCALSESSION_HOME and an empty HF cache for every test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("LOCALSESSION_MODEL_MAP", raising=False)
    monkeypatch.setenv("LOCALSESSION_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-empty"))
    return home


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``localsession/tiny`` written with save_pretrained (model + tokenizer)."""
    return save_builtin("localsession/tiny", tmp_path_factory.mktemp("tiny-dir"))


def test_builtins_resolve() -> None:
    for name in BUILTIN_MODELS:
        assert resolve_base_model(name) == ResolvedModel(name, "builtin", name)


def test_env_map_points_a_name_at_a_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "LOCALSESSION_MODEL_MAP", "openai/gpt-oss-20b=localsession/small, foo/bar=localsession/tiny"
    )
    resolved = resolve_base_model("openai/gpt-oss-20b")
    assert resolved == ResolvedModel("openai/gpt-oss-20b", "builtin", "localsession/small")
    assert resolve_base_model("foo/bar").target == "localsession/tiny"
    assert list_base_models()[:4] == [*BUILTIN_MODELS, "openai/gpt-oss-20b", "foo/bar"]


def test_models_json_map_and_env_wins(monkeypatch: pytest.MonkeyPatch, isolated_env: Path) -> None:
    (isolated_env / "models.json").write_text(
        json.dumps({"a/b": "localsession/tiny", "c/d": "localsession/tiny"})
    )
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "c/d=localsession/small")
    assert resolve_base_model("a/b").target == "localsession/tiny"
    assert resolve_base_model("c/d").target == "localsession/small"


def test_map_to_directory(monkeypatch: pytest.MonkeyPatch, saved_tiny: Path) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", f"org/model={saved_tiny}")
    resolved = resolve_base_model("org/model")
    assert (resolved.kind, Path(resolved.target)) == ("local", saved_tiny.resolve())


def test_unknown_name_lists_models_and_how_to_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "x/y=localsession/tiny")
    with pytest.raises(ValueError) as err:
        resolve_base_model("meta-llama/Llama-3.1-8B")
    message = str(err.value)
    assert "meta-llama/Llama-3.1-8B" in message
    for name in [*BUILTIN_MODELS, "x/y"]:
        assert name in message
    assert 'LOCALSESSION_MODEL_MAP="meta-llama/Llama-3.1-8B=' in message
    assert "models.json" in message and '{"meta-llama/Llama-3.1-8B": ' in message


def test_map_to_missing_target_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "x/y=/no/such/dir")
    with pytest.raises(ValueError, match="/no/such/dir"):
        resolve_base_model("x/y")


def test_bad_env_entry_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "justaname")
    with pytest.raises(ValueError, match="NAME=TARGET"):
        resolve_base_model("localsession/tiny")


def _logits(loaded: Any, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([tokens])).logits


def test_local_directory_loads_same_model(saved_tiny: Path, tiny_base: tuple[Any, Any]) -> None:
    resolved = resolve_base_model(str(saved_tiny))
    assert resolved.kind == "local"
    loaded = load_model(EngineSpec(str(saved_tiny), rank=4, alpha=8))
    base_model, base_tok = tiny_base
    tokens = base_tok.encode("same weights?")
    assert loaded.tokenizer.encode("same weights?") == tokens
    with torch.no_grad():
        expected = base_model(input_ids=torch.tensor([tokens])).logits
    torch.testing.assert_close(_logits(loaded, tokens), expected, atol=1e-6, rtol=0)


def test_fake_hf_cache_resolves_and_loads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, saved_tiny: Path, tiny_base: tuple[Any, Any]
) -> None:
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in saved_tiny.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (cache / "models--acme--no-config" / "snapshots" / "ff").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    assert list_base_models() == [*BUILTIN_MODELS, "acme/tiny-llama"]
    resolved = resolve_base_model("acme/tiny-llama")
    expected = ResolvedModel("acme/tiny-llama", "hf_cache", str(snapshot), "acme/tiny-llama")
    assert resolved == expected

    loaded = load_model(EngineSpec("acme/tiny-llama", rank=4, alpha=8))
    base_model, base_tok = tiny_base
    tokens = base_tok.encode("from the cache")
    with torch.no_grad():
        expected = base_model(input_ids=torch.tensor([tokens])).logits
    torch.testing.assert_close(_logits(loaded, tokens), expected, atol=1e-6, rtol=0)


def test_hf_home_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    snapshot = tmp_path / "hfhome" / "hub" / "models--o--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert resolve_base_model("o/m").target == str(snapshot)
