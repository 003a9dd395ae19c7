"""``--backend=import:planted:make_planted``: the fakes backend (its torch engine) with
three planted divergences, for the snapshot-check test (test_snapshots.py):

- the error code ``ResourceNotFound`` is answered as ``ResourceNotFoundException``;
- ``compute_logprobs`` answers each logprob 0.01 higher (far beyond the 1e-4/1e-5 tolerance);
- ``optim_step``'s metrics lack ``grad_norm``.
"""

from __future__ import annotations

from typing import Any

from conformance.adapter import Backend
from conformance.backends.fakes import make_fakes

RENAMED = ("ResourceNotFound", "ResourceNotFoundException")
SHIFT = 0.01
DROPPED = "grad_norm"


def make_planted(options: dict[str, Any]) -> Backend:
    from fakes.engine import FakeEngine
    from localsession.port import AdamHyperparams
    from localsession.port_results import OptimResult
    from localsession.runtime.errors import ServiceError

    init = ServiceError.__init__

    def renamed(self: ServiceError, code: str, message: str, http_status: int = 400) -> None:
        init(self, RENAMED[1] if code == RENAMED[0] else code, message, http_status)

    logprobs = FakeEngine.compute_logprobs

    def shifted(self: FakeEngine, weights: str | None, tokens: list[int]) -> list[float | None]:
        return [None if v is None else v + SHIFT for v in logprobs(self, weights, tokens)]

    optim = FakeEngine.optim_step

    def without(self: FakeEngine, adam_params: AdamHyperparams) -> OptimResult:
        metrics = optim(self, adam_params).metrics
        return OptimResult({k: v for k, v in metrics.items() if k != DROPPED})

    ServiceError.__init__ = renamed  # type: ignore[method-assign]
    FakeEngine.compute_logprobs = shifted  # type: ignore[method-assign]
    FakeEngine.optim_step = without  # type: ignore[method-assign]
    backend = make_fakes(options)
    backend.name = "fakes-planted"
    return backend
