"""The machine-wide cache of GGUF tokenizer exports (engine/tokenizer_cache.py): one export per
file content, copied for every later describe; a converted model's own tokenizer files are
used without reading the GGUF at all. The export itself is stood in for (counted)."""

from __future__ import annotations

import json
from pathlib import Path

from localsession.engine.gguf import MARKER, file_key
from localsession.engine.tokenizer_cache import cached_export
from localsession.port import ResolvedModel


def _gguf(path: Path, payload: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + b"\3\0\0\0" + payload)
    return path


class Exporter:
    """Stands in for the transformers export: counts calls, writes two small files."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, model: ResolvedModel, directory: Path) -> None:
        self.calls.append(model.name)
        (directory / "tokenizer_config.json").write_text(json.dumps({"from": model.target}))
        (directory / "tokenizer.json").write_text("{}")


def test_one_export_per_content_then_copies(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "models"
    first = _gguf(tmp_path / "a" / "m.gguf", b"\1" * 64)
    same = _gguf(tmp_path / "b" / "copy.gguf", b"\1" * 64)  # same bytes, another path
    other = _gguf(tmp_path / "c" / "n.gguf", b"\2" * 64)
    export = Exporter()
    for index, (name, path) in enumerate([("x/a", first), ("x/b", same), ("x/a", first)]):
        out = tmp_path / f"out{index}"
        model = ResolvedModel(name, "gguf", str(path), cache_root=str(cache))
        cached_export(model, out, export)
        assert json.loads((out / "tokenizer_config.json").read_text()) == {"from": str(first)}
    assert export.calls == ["x/a"]  # the content is the key: the copy exported nothing
    cached_export(
        ResolvedModel("x/c", "gguf", str(other), cache_root=str(cache)), tmp_path / "o", export
    )
    assert export.calls == ["x/a", "x/c"]
    assert sorted(p.name for p in (cache / "tokenizers").iterdir()) == sorted(
        f"{file_key(p)}-v1" for p in (first, other)
    )


def test_a_converted_model_lends_its_tokenizer_files(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    gguf = _gguf(tmp_path / "m.gguf", b"\3" * 64)
    converted = cache / file_key(gguf)
    converted.mkdir(parents=True)
    (converted / MARKER).write_text("{}")
    (converted / "tokenizer_config.json").write_text('{"converted": true}')
    (converted / "config.json").write_text('{"model_type": "llama"}')
    (converted / "model.safetensors").write_bytes(b"\0" * 32)
    export = Exporter()
    out = tmp_path / "out"
    cached_export(ResolvedModel("x/m", "gguf", str(gguf), cache_root=str(cache)), out, export)
    assert export.calls == []
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer_config.json"]


def test_other_kinds_are_exported_directly(tmp_path: Path) -> None:
    export = Exporter()
    model = ResolvedModel("x/local", "local", str(tmp_path))
    (tmp_path / "o1").mkdir()
    (tmp_path / "o2").mkdir()
    cached_export(model, tmp_path / "o1", export)
    cached_export(model, tmp_path / "o2", export)
    assert export.calls == ["x/local", "x/local"]
