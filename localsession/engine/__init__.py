"""The torch engine: everything in localsession that touches tensors.

``create_engine(spec)`` builds a :class:`TorchEngine` (the runtime's ``Engine`` protocol) for
one session; ``write_tokenizer`` is the tokenizer export the service's catalog uses for the
models the engine makes itself (built-in and GGUF). The pure parts (``losses``, ``optim``,
``datums``, ``sampling``) import only torch, and the fakes reuse them; ``TorchEngine``
(transformers, peft) is imported on first use (PEP 562), so importing a pure submodule never
loads transformers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localsession.runtime.engine_api import EngineSpec, ResolvedModel

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
    service's catalog exports built-in and GGUF tokenizers for the Hub."""
    with _IMPORT_LOCK:
        from localsession.engine.model import export_tokenizer

    export_tokenizer(model, directory)


def __getattr__(name: str) -> Any:
    if name == "TorchEngine":
        from localsession.engine.torch_engine import TorchEngine

        return TorchEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
