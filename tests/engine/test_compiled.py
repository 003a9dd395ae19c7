"""The opt-in compiled training forward (engine/compiled.py): agreement with eager on losses,
gradients and greedy samples (slow: compiling takes minutes on a CPU), and the clean fallback
to eager when compiling is unavailable or fails (fast)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from localsession.engine import compiled
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions

from .conftest import OPTIONS
from .helpers import greedy, make_datum, random_tokens, train


def test_eager_by_default(
    make_engine: Callable[..., TorchEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not make_engine(options=replace(OPTIONS, compile=""))._train_forward.is_compiled
    for value in ("0", "off", ""):
        assert EngineOptions.parse({compiled.COMPILE_ENV: value}).compile == ""
    assert EngineOptions.parse({compiled.COMPILE_ENV: "1"}).compile == "inductor"


def test_no_cxx_compiler_falls_back_with_one_log_line(
    make_engine: Callable[..., TorchEngine],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING, logger="localsession.engine.compiled"):
        engine = make_engine(options=replace(OPTIONS, compile="inductor"))
    assert not engine._train_forward.is_compiled
    assert [r.getMessage() for r in caplog.records] == [
        f"{compiled.COMPILE_ENV}=inductor: running eager instead "
        "(no C++ compiler found (set CXX or install g++))"
    ]


def test_failing_compiled_call_falls_back_to_eager_results(
    make_engine: Callable[..., TorchEngine],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def broken_compile(model: Any, **kwargs: Any) -> Callable[..., Any]:
        def run(**inputs: Any) -> Any:
            calls.append(1)
            raise RuntimeError("inductor exploded")

        return run

    eager_losses, eager_grads = train(make_engine(), 2)
    monkeypatch.setattr(compiled, "unavailable_reason", lambda backend, device: None)
    monkeypatch.setattr(torch, "compile", broken_compile)
    with caplog.at_level(logging.WARNING, logger="localsession.engine.compiled"):
        engine = make_engine(options=replace(OPTIONS, compile="inductor"))
        assert engine._train_forward.is_compiled
        losses, gradients = train(engine, 2)
    assert calls == [1]  # tried once, then eager for good
    assert not engine._train_forward.is_compiled
    assert len(caplog.records) == 1 and "inductor exploded" in caplog.records[0].getMessage()
    assert losses == eager_losses  # the very same eager computation
    for got, want in zip(gradients, eager_grads, strict=True):
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_agrees_with_eager(
    backend: str,
    make_engine: Callable[..., TorchEngine],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if backend == "inductor" and compiled.unavailable_reason(backend, torch.device("cpu")):
        pytest.skip("inductor cannot compile here (no C++ compiler)")
    eager = make_engine()
    fast = make_engine(options=replace(OPTIONS, compile=backend))
    assert fast._train_forward.is_compiled
    eager_losses, eager_grads = train(eager, 3)
    losses, gradients = train(fast, 3)
    assert fast._train_forward.is_compiled  # it did not fall back along the way
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    for got, want in zip(gradients, eager_grads, strict=True):
        assert got.keys() == want.keys()
        for key in want:  # per tensor: fused kernels reorder sums, so compare norms
            error = float((got[key] - want[key]).norm())
            assert error <= 1e-4 * float(want[key].norm()), (key, error)
    assert greedy(fast, tmp_path, "fast") == greedy(eager, tmp_path, "eager")
    # and the compiled forward-only path reads the same logprobs as eager's
    datums = [make_datum(t) for t in random_tokens(2, 20, seed=9)]
    got = fast.forward(datums, "cross_entropy", None).outputs
    want = eager.forward(datums, "cross_entropy", None).outputs
    for g, w in zip(got, want, strict=True):
        assert g.logprobs == pytest.approx(w.logprobs, rel=1e-5, abs=1e-6)
