"""The default wiring: the real engine and tokenizer writer, and the process-wide service.

What a plain ``ServiceClient()`` gets when it is handed no backend: a :class:`Service`
configured from the environment, over the local catalog, with the torch engine. The engine
and ``transformers`` are imported only when a session starts or a tokenizer is exported, so
``import localsession`` stays free of torch.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from localsession.port import Engine, EngineSpec, ResolvedModel

if TYPE_CHECKING:
    from localsession.runtime.service import Service


def default_engine_factory(spec: EngineSpec) -> Engine:
    """The real engine for a session (torch is imported here, not before)."""
    from localsession.engine import create_engine

    return create_engine(spec)


def default_tokenizer_writer(model: ResolvedModel, directory: Path) -> None:
    """Write a resolved model's tokenizer files (transformers is imported here)."""
    from localsession.engine import write_tokenizer

    write_tokenizer(model, directory)


_default: Service | None = None
_default_lock = threading.Lock()


def default_service() -> Service:
    """The process-wide service the in-process clients share, configured from the env.

    In-process clients submit in sequence order synchronously, so the only gap they can leave
    is a number consumed by a request refused client-side; it is recorded lost at once
    (``gap_timeout=0``) instead of blocking the client's later ops.
    """
    from localsession.runtime.config import ServiceConfig
    from localsession.runtime.service import Service

    global _default
    with _default_lock:
        if _default is None:
            _default = Service(ServiceConfig.from_env(gap_timeout=0.0))
            # Let running ops finish and engines close before the interpreter tears down.
            atexit.register(_default.close)
        return _default
