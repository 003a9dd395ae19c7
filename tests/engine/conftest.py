"""Shared fixtures for the engine tests: one tiny base model, fresh engines, wire datums.

Everything runs offline (``HF_HUB_OFFLINE=1``) on the CPU in float32 (``LOCALSESSION_DEVICE``
defaults to ``cpu`` here so results are deterministic; export ``LOCALSESSION_DEVICE=cuda``
to run the engine tests on a GPU): the engines made here run with :data:`OPTIONS`, the
environment's engine options read once, as the wiring reads them. Torch uses one intra-op
thread here (``LOCALSESSION_TEST_THREADS`` overrides): the tiny models gain nothing from
more, and on a shared 2-core machine OpenMP spinning under contention can slow a step down a
hundredfold.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("LOCALSESSION_DEVICE", "cpu")

from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from localsession.engine.builtin import build_builtin  # noqa: E402
from localsession.engine.torch_engine import TorchEngine  # noqa: E402
from localsession.engine_options import EngineOptions  # noqa: E402
from localsession.port import EngineSpec  # noqa: E402

TINY = "localsession/tiny"
#: The engine options of every engine made here (``LOCALSESSION_*``, read once).
OPTIONS = EngineOptions.from_env()

torch.set_num_threads(int(os.environ.get("LOCALSESSION_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny_base() -> tuple[Any, Any]:
    """The plain ``localsession/tiny`` model and tokenizer (read-only: do not train it)."""
    return build_builtin(TINY)


@pytest.fixture(scope="session")
def tiny_engine() -> Iterator[TorchEngine]:
    """One shared engine for tests that neither train nor change its state."""
    engine = TorchEngine(EngineSpec(TINY, rank=8, alpha=16, seed=0, options=OPTIONS))
    yield engine
    engine.close()


@pytest.fixture
def make_engine() -> Iterator[Callable[..., TorchEngine]]:
    """Factory for fresh engines (closed at teardown): ``make_engine(rank=8, seed=0)``;
    ``options=EngineOptions(...)`` replaces :data:`OPTIONS`."""
    made: list[TorchEngine] = []

    def factory(**kwargs: Any) -> TorchEngine:
        spec = EngineSpec(
            kwargs.pop("base_model", TINY),
            rank=kwargs.pop("rank", 8),
            alpha=kwargs.pop("alpha", 16),
            seed=kwargs.pop("seed", 0),
            options=kwargs.pop("options", OPTIONS),
        )
        assert not kwargs, f"unknown engine options {kwargs}"
        engine = TorchEngine(spec)
        made.append(engine)
        return engine

    yield factory
    for engine in made:
        engine.close()
