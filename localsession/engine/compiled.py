"""The opt-in compiled training forward: ``torch.compile`` of the LoRA model, eager otherwise.

``LOCALSESSION_COMPILE`` chooses it (``EngineOptions.compile``, engine_options.py): unset, ``0``
or ``off`` runs eager (the default); ``1``, ``on`` or ``inductor`` compiles with inductor; any
other value names a ``torch.compile`` backend (``aot_eager``: the compile machinery without
code generation, for tests). The compiled module's forward and backward (AOTAutograd) replace the
eager ones in ``forward_backward`` / ``forward``; sampling and ``compute_logprobs`` stay eager.

It falls back to eager, with one log line, and stays there for that engine:

- where inductor cannot build code: no C++ compiler on a CPU (``CXX``, ``c++``, ``g++`` or
  ``clang++``), or a probe (a two-op function compiled forward and backward, once per process
  and backend) fails;
- when a compiled call raises: the same call then runs eager, so a caller's own errors
  (a bad input) still surface from the eager model, unchanged.

Compilation is slow and happens again for each new input shape until dynamo marks the shape
dynamic (on 2 cores at load ~10: ``localsession/small`` 150 s; SmolLM2-135M at 8×256 18 min
cold, 4.6 min from a warm inductor cache, then 1.3-1.5× eager's speed). So it stays opt-in.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any

import torch

COMPILE_ENV = "LOCALSESSION_COMPILE"

_log = logging.getLogger("localsession.engine.compiled")
#: backend -> whether its probe compiled (one probe per process and backend)
_PROBED: dict[str, bool] = {}
_PROBE_LOCK = threading.Lock()


def cxx_compiler() -> str | None:
    """The C++ compiler inductor's CPU code generation would find, or ``None``."""
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _probe(backend: str) -> None:
    """Compile a two-op function with ``backend``, forward and backward; raises if it can't."""
    x_N = torch.linspace(-1.0, 1.0, 8, requires_grad=True)  # [8]
    compiled = torch.compile(lambda v: (v * 2.0).sin().sum(), backend=backend)
    compiled(x_N).backward()
    expected_N = 2.0 * torch.cos(2.0 * x_N.detach())
    if x_N.grad is None or not torch.allclose(x_N.grad, expected_N, rtol=1e-5, atol=1e-6):
        raise RuntimeError(f"the {backend} probe's gradient is wrong")


def unavailable_reason(backend: str, device: torch.device) -> str | None:
    """Why ``backend`` cannot compile on ``device`` here (``None``: it can)."""
    if backend == "inductor" and device.type == "cpu" and cxx_compiler() is None:
        return "no C++ compiler found (set CXX or install g++)"
    with _PROBE_LOCK:
        if backend not in _PROBED:
            try:
                _probe(backend)
                _PROBED[backend] = True
            except Exception as exc:  # any failure of the toolchain: run eager
                _log.debug("compile probe failed", exc_info=exc)
                _PROBED[backend] = False
        return None if _PROBED[backend] else f"the {backend} probe failed to compile"


class TrainingForward:
    """Calls the compiled model when compiling is on and works, else the eager model.

    ``compiler`` (default ``torch.compile``) is injectable so tests can force a failure.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        backend: str | None = None,
        compiler: Callable[..., Any] | None = None,
    ) -> None:
        self.model = model
        self.backend = backend or None  # "" (EngineOptions' eager) and None: eager
        #: the compiled callable, or ``None`` while running eager
        self.compiled: Callable[..., Any] | None = None
        if self.backend is None:
            return
        reason = unavailable_reason(self.backend, device)
        if reason is not None:
            self._fall_back(reason)
            return
        compile_fn = compiler if compiler is not None else torch.compile
        try:
            self.compiled = compile_fn(model, backend=self.backend)
        except Exception as exc:
            self._fall_back(f"torch.compile raised {type(exc).__name__}: {exc}")

    @property
    def is_compiled(self) -> bool:
        """Whether calls go to the compiled model."""
        return self.compiled is not None

    def _fall_back(self, reason: str) -> None:
        _log.warning("%s=%s: running eager instead (%s)", COMPILE_ENV, self.backend, reason)
        self.compiled = None

    def __call__(self, **inputs: Any) -> Any:
        """``model(**inputs)``, through the compiled module when there is one."""
        if self.compiled is not None:
            try:
                return self.compiled(**inputs)
            except Exception as exc:
                self._fall_back(f"the compiled call raised {type(exc).__name__}: {exc}")
        return self.model(**inputs)
