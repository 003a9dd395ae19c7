"""Deliberately broken backends, for the meta-test that proves the suite can fail.

Each is the fakes backend with one planted defect, selected with
``--backend=import:conformance.selfcheck:<name>``:

- ``mean_loss``: each op's loss is the mean over its batch's tokens instead of the sum
  (metric, ``elementwise_loss`` and gradient: the loss is rescaled before backward);
- ``reordered``: an ``optim_step`` is applied only after the next training op has run, so
  that op runs out of order (it sees the weights from before the step);
- ``dirty_failure``: a ``forward_backward`` that fails on its inputs first accumulates the
  gradient of its valid datums, so a failed op changes state;
- ``live_sampler``: samplers read the live training weights, not their saved snapshot.

:data:`EXPECTED` names the tests each defect must make fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.adapter import Backend
from conformance.backends.fakes import fakes_backend
from localsession.port import AdamHyperparams, TrainingDatum
from localsession.port_results import OptimResult

EXPECTED: dict[str, set[str]] = {
    "mean_loss": {
        "test_losses.py::test_cross_entropy_closed_form",
        "test_numerics.py::test_loss_is_invariant_to_splitting_the_batch",
        "test_numerics.py::test_gradient_accumulation_is_invariant_to_splitting",
        "test_losses.py::test_rl_loss_closed_form_with_default_clips[ppo]",
    },
    "reordered": {
        "test_futures.py::test_training_ops_run_in_call_order",
        "test_failures.py::test_optim_step_with_no_gradient_changes_nothing",
        "test_checkpoints.py::test_resume_with_optimizer_continues_identically",
    },
    "dirty_failure": {
        "test_failures.py::test_failed_forward_backward_adds_no_gradient",
        "test_stateful.py::test_stateful_small",
    },
    "live_sampler": {
        "test_checkpoints.py::test_sampler_is_isolated_from_later_training",
        "test_stateful.py::test_stateful_small",
    },
}


class _MeanLoss:
    """Divides each op's loss by its batch's token count before anything sees it."""

    @staticmethod
    def wrap(engine: Any) -> None:
        import fakes.engine as fe

        original = fe.compute_loss

        def mean_loss(loss_fn: str, lp_BT: Any, inputs: Any, clip: Any) -> Any:
            loss_BT, metrics = original(loss_fn, lp_BT, inputs, clip)
            loss_BT = loss_BT / inputs.mask.sum().clamp(min=1)
            metrics = {**metrics, "loss": float(loss_BT.detach().sum())}
            return loss_BT, metrics

        fe.compute_loss = mean_loss  # type: ignore[assignment]


def _broken_service(defect: str) -> Any:
    from fakes import FakeService
    from fakes.engine import EngineInputError, FakeEngine

    class BrokenEngine(FakeEngine):
        pending_step: AdamHyperparams | None = None

        def forward_backward(self, datums: Sequence[TrainingDatum], *args: Any, **kw: Any) -> Any:
            if defect == "mean_loss":
                return self._mean(datums, *args, **kw)
            if defect == "dirty_failure":
                try:
                    return super().forward_backward(datums, *args, **kw)
                except EngineInputError:
                    if kw.get("backward") and len(datums) > 1:
                        super().forward_backward(datums[:1], *args, **kw)
                    raise
            out = super().forward_backward(datums, *args, **kw)
            if defect == "reordered" and self.pending_step is not None:
                params, self.pending_step = self.pending_step, None
                super().optim_step(params)
            return out

        def _mean(self, datums: Sequence[TrainingDatum], *args: Any, **kw: Any) -> Any:
            import fakes.engine as fe

            original = fe.compute_loss
            _MeanLoss.wrap(self)
            try:
                return super().forward_backward(datums, *args, **kw)
            finally:
                fe.compute_loss = original

        def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
            if defect == "reordered":
                self.pending_step = adam_params
                return OptimResult(
                    {
                        "learning_rate": adam_params.learning_rate,
                        "grad_norm": 1.0,
                        "num_params_updated": 1.0,
                    }
                )
            return super().optim_step(adam_params)

        def _weights(self, weights: str | None) -> Any:
            if defect == "live_sampler" and weights is not None:
                return self.model.table().detach().clone()
            return super()._weights(weights)

    return FakeService(strict=False, max_sessions=4, numerics=True, engine_factory=BrokenEngine)


def _make(defect: str) -> Backend:
    backend = fakes_backend(f"broken-{defect}", _broken_service(defect), xfail="none")
    backend.details["defect"] = defect
    return backend


def mean_loss(options: dict[str, Any]) -> Backend:
    return _make("mean_loss")


def reordered(options: dict[str, Any]) -> Backend:
    return _make("reordered")


def dirty_failure(options: dict[str, Any]) -> Backend:
    return _make("dirty_failure")


def live_sampler(options: dict[str, Any]) -> Backend:
    return _make("live_sampler")
