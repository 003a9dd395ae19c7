"""The real-model tier: SmolLM2-135M-Instruct, converted once from its GGUF (fixtures.py)."""

from .fixtures import shipped_gguf, smol_cache, smol_dir

__all__ = ["shipped_gguf", "smol_cache", "smol_dir"]
