"""The torch engine: everything in localsession that touches tensors.

``create_engine(spec)`` builds a :class:`TorchEngine` (the runtime's ``Engine`` protocol) for
one session. Importing this package imports torch, transformers and peft, so the runtime
imports it lazily when a session starts.
"""

from __future__ import annotations

from localsession.engine.torch_engine import TorchEngine
from localsession.runtime.engine_api import EngineSpec

__all__ = ["TorchEngine", "create_engine"]


def create_engine(spec: EngineSpec) -> TorchEngine:
    """Load ``spec.base_model`` with a fresh seeded LoRA adapter (rank/alpha from ``spec``)."""
    return TorchEngine(spec)
