"""The torch engine: everything in localsession that touches tensors.

``create_engine(spec)`` builds a :class:`TorchEngine` (the runtime's ``Engine`` protocol) for
one session. The pure parts (``losses``, ``optim``, ``datums``, ``sampling``) import only
torch, and the fakes reuse them; ``TorchEngine`` (transformers, peft) is imported on first use
(PEP 562), so importing a pure submodule never loads transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localsession.runtime.engine_api import EngineSpec

if TYPE_CHECKING:
    from localsession.engine.torch_engine import TorchEngine

__all__ = ["TorchEngine", "create_engine"]


def create_engine(spec: EngineSpec) -> TorchEngine:
    """Load ``spec.base_model`` with a fresh seeded LoRA adapter (rank/alpha from ``spec``)."""
    from localsession.engine.torch_engine import TorchEngine

    return TorchEngine(spec)


def __getattr__(name: str) -> Any:
    if name == "TorchEngine":
        from localsession.engine.torch_engine import TorchEngine

        return TorchEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
