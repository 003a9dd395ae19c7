"""A GGUF model's tokenizer export, cached by the file's content for the whole machine.

Reading a tokenizer out of a GGUF file takes seconds (transformers parses the whole metadata
block, the 49k-entry vocabulary and merges of SmolLM2 included, once for the config and once
for the tokenizer; the weights are not dequantised). A Hub describe exports it into the
server's or the mock's own Hugging Face cache, which a mock deletes when it ends, so without
a cache every new ``mock()`` paid it again.

:func:`cached_export` keeps one export per GGUF file under ``<cache_root>/tokenizers/<key>``
(``cache_root`` is the machine-wide model cache, ``shared_cache()/models``, where the
converted model lives under the same key: the file's SHA-256). The first export copies the
tokenizer out of the converted model directory if that exists (no GGUF read at all), else
reads it from the GGUF once; every later export, in this process or another, is a copy of a
few files. Torch-free.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from localsession.engine.gguf import MARKER, file_key, find_gguf  # torch-free at import
from localsession.port import ResolvedModel

#: Bumped when what an export holds changes.
EXPORT_FORMAT = 1
#: Files an export never takes from a converted model directory: weights, and the
#: conversion's own record (``gguf.MARKER``).
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")

_lock = threading.Lock()
_keys: dict[tuple[str, int, int], str] = {}


def gguf_key(path: Path) -> str:
    """The GGUF file's content key (``gguf.file_key``), hashed once per process per version
    of the file (path, size and modification time)."""
    stat = path.stat()
    memo = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _lock:
        key = _keys.get(memo)
    if key is None:
        key = file_key(path)
        with _lock:
            _keys[memo] = key
    return key


def _copy_files(source: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        skip = item.name.startswith(".") or item.suffix in _WEIGHTS or item.name == MARKER
        if item.is_file() and not skip:
            shutil.copy2(item, directory / item.name)


def cached_export(
    model: ResolvedModel, directory: Path, export: Callable[[ResolvedModel, Path], None]
) -> None:
    """``export(model, directory)``, served from the machine-wide cache for a GGUF model."""
    if model.kind != "gguf" or not model.cache_root:
        export(model, directory)
        return
    source = find_gguf(Path(model.target))
    key = gguf_key(source)
    root = Path(model.cache_root).expanduser()
    entry = root / "tokenizers" / f"{key}-v{EXPORT_FORMAT}"
    if not (entry / "tokenizer_config.json").is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".export-", dir=entry.parent))
        try:
            converted = root / key
            if (converted / MARKER).is_file() and (converted / "tokenizer_config.json").is_file():
                _copy_files(converted, staging)
            else:
                export(model, staging)
            try:
                os.replace(staging, entry)
            except OSError:  # another process stored the same export first
                if not (entry / "tokenizer_config.json").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _copy_files(entry, directory)  # the files do not depend on the name it is listed under
