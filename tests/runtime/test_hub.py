"""The local Hub (runtime/models/hub.py): entries under the ids users type, and tokenizer exports
into localsession's own HF cache in the layout ``huggingface_hub`` reads. Torch-free: the
tokenizer writer here is a stand-in that writes one file naming what it was asked for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from localsession.runtime.errors import ServiceError
from localsession.runtime.models import hub
from localsession.runtime.models.catalog import LocalCatalog, ResolvedModel, StaticCatalog

REGION = "eu-west-1"
REQUEST = {"HubName": "SageMakerPublicHub", "HubContentType": "Model"}


def _writer(model: ResolvedModel, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer_config.json").write_text(json.dumps({"target": model.target}))


def _describe(catalog: Any, home: Path, name: str) -> dict[str, Any]:
    request = {**REQUEST, "HubContentName": name}
    return hub.describe_hub_content(request, REGION, catalog, home / hub.HUB_CACHE_DIR)


def test_entries_are_published_under_the_ids_users_type(tmp_path: Path) -> None:
    catalog = StaticCatalog(
        {"openai/gpt-oss-20b": "localsession/tiny", "my_model": "localsession/small"},
        tokenizer_writer=_writer,
    )
    listed = hub.list_hub_contents(REQUEST, REGION, catalog)["HubContentSummaries"]
    assert [s["HubContentName"] for s in listed] == ["my-model", "openai-gpt-oss-20b"]
    assert listed[1]["HubContentSearchKeywords"] == [
        "@capability:training_session",
        "@huggingface-id:openai/gpt-oss-20b",
    ]
    assert listed[1]["HubContentArn"].startswith(f"arn:aws:sagemaker:{REGION}:aws:hub-content/")
    document = json.loads(_describe(catalog, tmp_path, "openai-gpt-oss-20b")["HubContentDocument"])
    assert document == {"HuggingfaceId": "openai/gpt-oss-20b", "LocalModel": "openai/gpt-oss-20b"}
    # A name without "org/" is listed by the SDK under its Hub content name; so is its id.
    document = json.loads(_describe(catalog, tmp_path, "my-model")["HubContentDocument"])
    assert document["HuggingfaceId"] == "my-model" and document["LocalModel"] == "my_model"
    with pytest.raises(ServiceError, match="Local Hub models: my-model, openai-gpt-oss-20b"):
        _describe(catalog, tmp_path, "nope")


def test_describe_exports_the_tokenizer_in_hf_cache_layout(tmp_path: Path) -> None:
    catalog = StaticCatalog({"openai/gpt-oss-20b": "localsession/tiny"}, tokenizer_writer=_writer)
    _describe(catalog, tmp_path, "openai-gpt-oss-20b")
    repo = tmp_path / "hf-hub" / "models--openai--gpt-oss-20b"
    revision = (repo / "refs" / "main").read_text()
    assert len(revision) == 40 and int(revision, 16) >= 0
    snapshot = repo / "snapshots" / revision
    assert json.loads((snapshot / "tokenizer_config.json").read_text()) == {
        "target": "localsession/tiny"
    }
    assert sorted(p.name for p in (repo / "snapshots").iterdir()) == [revision]  # no staging left
    _describe(catalog, tmp_path, "openai-gpt-oss-20b")  # idempotent
    assert (repo / "refs" / "main").read_text() == revision


def test_remapping_a_name_exports_again_under_a_new_revision(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = LocalCatalog(home, model_map={"o/m": "localsession/tiny"}, tokenizer_writer=_writer)
    second = LocalCatalog(home, model_map={"o/m": "localsession/small"}, tokenizer_writer=_writer)
    one = hub.export_tokenizer(first, "o/m", home / "hf-hub")
    two = hub.export_tokenizer(second, "o/m", home / "hf-hub")
    assert one != two and one.parent == two.parent
    assert (one.parent.parent / "refs" / "main").read_text() == two.name
    assert json.loads((two / "tokenizer_config.json").read_text())["target"] == "localsession/small"


def test_a_failing_export_still_answers_describe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(model: ResolvedModel, directory: Path) -> None:
        raise ValueError("corrupt tokenizer")

    catalog = StaticCatalog(["acme/broken"], tokenizer_writer=broken)
    described = _describe(catalog, tmp_path, "acme-broken")
    assert json.loads(described["HubContentDocument"])["HuggingfaceId"] == "acme/broken"
    assert "corrupt tokenizer" in caplog.text
    assert not any((tmp_path / "hf-hub" / "models--acme--broken" / "snapshots").iterdir())


def test_export_all_exports_the_gguf_tokenizers_last(tmp_path: Path) -> None:
    order: list[str] = []

    def writer(model: ResolvedModel, directory: Path) -> None:
        order.append(model.name)
        _writer(model, directory)

    class Catalog(StaticCatalog):
        def resolve(self, name: str) -> ResolvedModel:
            found = super().resolve(name)
            return dataclasses.replace(found, kind="gguf") if name.startswith("a/") else found

    models = {"a/gguf": "x.gguf", "b/mapped": "localsession/tiny", "z/built": "localsession/small"}
    hub.export_all(Catalog(models, tokenizer_writer=writer), tmp_path)
    assert order == ["b/mapped", "z/built", "a/gguf"]
    assert (tmp_path / "models--a--gguf" / "refs" / "main").is_file()
