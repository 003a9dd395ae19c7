"""Training ops on the caller's thread (runtime/sessions/runner.py) with the torch engine.

``plain_torch_thread`` refuses a thread whose torch state differs from a fresh thread's, and a
loop whose ops run on its own thread computes, bit for bit, what the same loop computes with
every op on the session's worker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from localsession import AdamParams, ServiceClient
from localsession.engine.thread_state import plain_torch_thread
from localsession.engine.torch_engine import TorchEngine
from localsession.runtime.service import Service
from localsession.runtime.sessions import runner

from .helpers import untimed, wire_datum

MODEL = "localsession/tiny"


class _Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_another_current_cuda_device_is_not_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert not plain_torch_thread()


def test_a_fresh_thread_is_plain_and_each_context_makes_it_not() -> None:
    assert plain_torch_thread()
    contexts = {
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
        "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        "device": lambda: torch.device("cpu"),
        "dispatch mode": _Passthrough,
    }
    for name, make in contexts.items():
        with make():
            assert not plain_torch_thread(), name
        assert plain_torch_thread(), f"after {name}"


BATCH = [wire_datum([1, 72, 101, 108, 108, 111]), wire_datum([1, 87, 111, 114, 108, 100, 33])]


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The thread of every ``TorchEngine.forward_backward``, in order."""
    seen: list[str] = []
    real = TorchEngine.forward_backward

    def recording(self: TorchEngine, *args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TorchEngine, "forward_backward", recording)
    # a tiny op counts as quick up to 30 s (not 0.1 s), whatever the box's load
    monkeypatch.setattr(runner, "QUICK_S", 30.0)
    yield seen


def run(client: ServiceClient, timeout: float | None) -> list[Any]:
    """Three steps on one batch, waiting with ``result(timeout)``; every forward_backward's
    metrics and per-token logprobs, and every step's metrics."""
    out: list[Any] = []
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        for _ in range(3):
            fb = tc.forward_backward(BATCH).result(timeout)
            step = tc.optim_step(AdamParams(learning_rate=1e-2)).result(timeout)
            out.append((untimed(fb.metrics), [o["logprobs"] for o in fb.loss_fn_outputs]))
            out.append(step.metrics)
    return out


def test_ops_run_on_the_caller_compute_what_the_worker_computes(
    client: ServiceClient, service: Service, threads: list[str]
) -> None:
    torch.manual_seed(0)
    here = run(client, None)
    ran_here = list(threads)
    threads.clear()
    torch.manual_seed(0)
    on_worker = run(client, 60.0)
    main = threading.current_thread().name
    # The first op of a kind runs on the worker (no duration known yet); once one ran
    # quick, the next runs here. (The first forward_backward may be slow: warm-up.)
    assert ran_here[0] != main and ran_here[-1] == main
    assert main not in threads  # with a time limit, every op waits for the worker
    assert here == on_worker
