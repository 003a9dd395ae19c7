"""The torch engine: everything in localsession that touches model weights.

``create_engine(spec)`` builds a :class:`TorchEngine` (the runtime's ``Engine`` protocol) for
one session; ``write_tokenizer`` is the tokenizer export the service's catalog uses for the
models the engine makes itself (built-in and GGUF). ``TorchEngine`` (transformers, peft) is
imported on first use (PEP 562), so importing this package never loads transformers.

- ``torch_engine``: ``TorchEngine``, one session's adapter, optimizer and lock, with its parts
  ``train_step`` (the loss and its gradients), ``snapshots`` (package adapters for sampling),
  ``request_checks`` (sample and logprob inputs), ``sampling`` (the batched KV-cache sampler),
  ``merged`` (plain decoding copies) and ``checkpoint`` (package files).
- ``loading`` (a resolved model onto a device with a seeded LoRA), ``base_pool`` (one copy of
  a base shared by sessions), ``placement`` (bases bigger than the device), ``precision``,
  ``gguf``, ``builtin`` (the built-in tiny models), ``flops`` and ``memory``.

The pure math (losses, AdamW, datums, sampling filters) is ``localsession.numerics``, shared
with the fakes. From the runtime the engine imports only the port, ``localsession.port``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localsession.port import EngineSpec, ResolvedModel

if TYPE_CHECKING:
    from localsession.engine.torch_engine import TorchEngine

__all__ = ["TorchEngine", "create_engine", "write_tokenizer"]

#: transformers and peft are not safe to import from two threads at once (a lazy module seen
#: half-initialised fails with "cannot import name"); a server may start a session while its
#: Hub exports a tokenizer, so the first import of the stack happens under this lock.
_IMPORT_LOCK = threading.Lock()


def create_engine(spec: EngineSpec) -> TorchEngine:
    """Load ``spec.base_model`` with a fresh seeded LoRA adapter (rank/alpha from ``spec``)."""
    with _IMPORT_LOCK:
        from localsession.engine.torch_engine import TorchEngine

    return TorchEngine(spec)


def write_tokenizer(model: ResolvedModel, directory: Path) -> None:
    """Write the tokenizer of a resolved model, and the model's ``config.json`` (which
    ``AutoTokenizer`` reads too), into ``directory`` with ``save_pretrained``: how the
    service's catalog exports built-in and GGUF tokenizers for the Hub. A built-in's files
    are written without torch or transformers (``builtin_files``); a GGUF model's export is
    cached machine-wide by the file's content (``tokenizer_cache``)."""
    if model.kind == "builtin":
        from localsession.engine.builtin_files import write_files

        write_files(model.target, directory)
        return
    from localsession.engine.tokenizer_cache import cached_export

    cached_export(model, directory, _export_with_transformers)


def _export_with_transformers(model: ResolvedModel, directory: Path) -> None:
    with _IMPORT_LOCK:
        from localsession.engine import loading

    loading.export_tokenizer(model, directory)


def __getattr__(name: str) -> Any:
    if name == "TorchEngine":
        from localsession.engine.torch_engine import TorchEngine

        return TorchEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
