"""Deliberately broken backends, for the meta-test that proves the suite can fail.

Each is the fakes backend with one planted defect, selected with
``--backend=import:conformance.selfcheck:<name>``:

- ``mean_loss``: each op's loss is the mean over its batch's tokens instead of the sum
  (metric, ``elementwise_loss`` and gradient: the loss is rescaled before backward);
- ``reordered``: an ``optim_step`` is applied only after the next training op has run, so
  that op runs out of order (it sees the weights from before the step);
- ``dirty_failure``: a ``forward_backward`` that fails on its inputs first accumulates the
  gradient of its valid datums, so a failed op changes state;
- ``live_sampler``: samplers read the live training weights, not their saved snapshot;
- ``seed_ignored``: every sample request's seed is replaced by a random one;
- ``stop_ignored``: sample requests lose their stop strings;
- ``greedy_ignored``: temperature 0 samples at temperature 1;
- ``max_tokens_ignored``: samples run 3 tokens past ``max_tokens``;
- ``no_elementwise_loss``: ``loss_fn_outputs`` lose ``elementwise_loss`` (empty lists);
- ``refusal_500``: every refusal keeps its error code but is answered HTTP 500;
- ``sm_lr_doubled``: ``optim_step`` applies twice the requested learning rate (its
  ``learning_rate`` metric still says 1x);
- ``sm_betas_swapped``: ``optim_step`` runs with beta1 and beta2 swapped;
- ``sm_decay_ignored``: ``optim_step`` runs without weight decay;
- ``sm_clip_ignored``: ``optim_step`` never clips the gradient;
- ``sm_load_keeps_moments``: ``load_state`` (weights only) keeps the old Adam moments;
- ``sm_rank_ignored``: every session's adapter has rank 16, whatever was requested;
- ``sm_temperature_ignored``: every non-zero temperature samples at temperature 1;
- ``sm_rank_unbounded``: a LoRA rank above the documented 256 is accepted (docs/wire.md#10);
- ``sm_description_unbounded``: a save's description over 1024 characters is accepted;
- ``sm_never_expires``: a session idle past the idle timeout stays Running;
- ``sm_activity_ignored``: ops do not count as activity: a session expires its idle timeout
  after its creation, however busy;
- ``sm_expired_runs_ops``: an Expired session still accepts runtime ops.

The three expiry defects run on a service that expires sessions idle for
:data:`IDLE_TIMEOUT_S` seconds and declares it (``Limits.idle_timeout_s``).

The ``sm_`` defects are read back from the saved packages' artifacts (suite/test_optimizer.py,
suite/test_temperature.py); ``selfcheck_tinker.py`` plants their Tinker twins.

Each backend declares no capability (the plain third-party configuration: the spec points of
``capabilities.SPEC`` are checked anyway) but those :data:`DECLARES` names, for a defect
that breaks a local decision. :data:`EXPECTED` names the tests each defect must make fail.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from conformance.adapter import Backend
from conformance.backends.fakes import expire_idle_after, fakes_backend
from localsession.port import AdamHyperparams, EngineSpec, TrainingDatum
from localsession.port_results import OptimResult

IDLE = "test_sessions.py::test_a_session_idle_past_the_timeout_expires"
#: The idle timeout of the expiry defects' service, in seconds: their test then runs about
#: 1.5 x this + 5 s.
IDLE_TIMEOUT_S = 2.0
EXPIRY = frozenset({"sm_never_expires", "sm_activity_ignored", "sm_expired_runs_ops"})
EXPECTED: dict[str, set[str]] = {
    "mean_loss": {
        "test_losses.py::test_cross_entropy_closed_form",
        "test_numerics.py::test_loss_is_invariant_to_splitting_the_batch",
        "test_losses.py::test_rl_loss_closed_form_with_default_clips[ppo]",
    },
    "reordered": {
        "test_futures.py::test_training_ops_run_in_call_order",
        "test_checkpoints.py::test_resume_with_optimizer_continues_identically",
    },
    "dirty_failure": {
        "test_failures.py::test_failed_forward_backward_adds_no_gradient",
        "test_stateful.py::test_stateful_small",
    },
    "live_sampler": {"test_checkpoints.py::test_sampler_is_isolated_from_later_training"},
    "seed_ignored": {"test_sampling.py::test_same_seed_same_tokens"},
    "stop_ignored": {"test_sampling.py::test_stop_strings_end_generation"},
    "greedy_ignored": {"test_sampling.py::test_greedy_picks_the_most_likely_token"},
    "max_tokens_ignored": {"test_sampling.py::test_stop_reason_length_means_max_tokens"},
    "no_elementwise_loss": {"test_losses.py::test_cross_entropy_closed_form"},
    "refusal_500": {"test_validation.py::test_lora_rank_out_of_range_is_refused[300]"},
    "sm_lr_doubled": {"test_optimizer.py::test_adamw_steps_follow_the_closed_form"},
    "sm_betas_swapped": {"test_optimizer.py::test_adamw_steps_follow_the_closed_form"},
    "sm_decay_ignored": {
        "test_optimizer.py::test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate"
    },
    "sm_clip_ignored": {"test_optimizer.py::test_grad_clip_norm_bounds_the_global_gradient_norm"},
    "sm_load_keeps_moments": {
        "test_optimizer.py::test_load_state_resets_the_moments_and_with_optimizer_keeps_them"
    },
    "sm_rank_ignored": {
        "test_optimizer.py::test_the_adapter_has_the_requested_rank[2]",
        "test_optimizer.py::test_the_adapter_has_the_requested_rank[8]",
    },
    "sm_temperature_ignored": {
        "test_temperature.py::test_a_temperature_reshapes_the_distribution_as_the_softmax_says"
    },
    "sm_rank_unbounded": {"test_validation.py::test_lora_rank_out_of_range_is_refused[300]"},
    "sm_description_unbounded": {
        "test_validation.py::test_a_description_over_1024_characters_is_refused"
    },
    "sm_never_expires": {IDLE},
    "sm_activity_ignored": {IDLE},
    "sm_expired_runs_ops": {IDLE},
}
#: Defects the default suite's meta-test leaves to the full run (make selfcheck) and the
#: slow tier, to keep the default suite short.
SLOW = frozenset(
    {"seed_ignored", "stop_ignored", "greedy_ignored", "max_tokens_ignored"}
    | {"dirty_failure", "reordered", "refusal_500"}
    | {d for d in EXPECTED if d.startswith("sm_") and d != "sm_lr_doubled"}
)
#: What the optimizer defects do to the requested AdamW hyperparameters.
ADAM_DEFECTS: dict[str, Callable[[AdamHyperparams], AdamHyperparams]] = {
    "sm_lr_doubled": lambda p: replace(p, learning_rate=2 * p.learning_rate),
    "sm_betas_swapped": lambda p: replace(p, beta1=p.beta2, beta2=p.beta1),
    "sm_decay_ignored": lambda p: replace(p, weight_decay=0.0),
    "sm_clip_ignored": lambda p: replace(p, grad_clip_norm=None),
}
#: Local decisions a defect's backend declares (it breaks one); every other defect's backend
#: declares none.
DECLARES: dict[str, frozenset[str]] = {
    "dirty_failure": frozenset({"failure.isolated", "optim.empty_step_noop"}),
}


class _MeanLoss:
    """Divides each op's loss by its batch's token count before anything sees it."""

    @staticmethod
    def wrap(engine: Any) -> None:
        import fakes.engine as fe

        original = fe.compute_loss

        def mean_loss(loss_fn: str, lp: Any, inputs: Any, clip: Any) -> Any:
            loss_BT, metrics = original(loss_fn, lp, inputs, clip)
            # the batch's real tokens (no mask when no row is padded: every position counts)
            tokens = inputs.mask.sum().clamp(min=1) if inputs.mask is not None else lp.numel()
            loss_BT = loss_BT / tokens
            metrics = {**metrics, "loss": float(loss_BT.detach().sum())}
            return loss_BT, metrics

        fe.compute_loss = mean_loss  # type: ignore[assignment]


def _broken_service(defect: str) -> Any:
    from fakes import FakeService
    from fakes.engine import EngineInputError, FakeEngine

    class BrokenEngine(FakeEngine):
        pending_step: AdamHyperparams | None = None

        def __init__(self, spec: EngineSpec, **kw: Any) -> None:
            if defect == "sm_rank_ignored":
                spec = replace(spec, rank=16, alpha=32)
            super().__init__(spec, **kw)

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
            if defect == "no_elementwise_loss":
                out = replace(out, outputs=[replace(o, elementwise_loss=[]) for o in out.outputs])
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
            if defect in ADAM_DEFECTS:
                out = super().optim_step(ADAM_DEFECTS[defect](adam_params))
                return OptimResult({**out.metrics, "learning_rate": adam_params.learning_rate})
            return super().optim_step(adam_params)

        def load_package(self, directory: str, *, load_optimizer: bool) -> None:
            kept = self._optimizer
            super().load_package(directory, load_optimizer=load_optimizer)
            if defect == "sm_load_keeps_moments" and not load_optimizer:
                self._optimizer = kept

        def sample(self, weights: str | None, requests: list[Any]) -> Any:
            return super().sample(weights, [_broken_request(defect, r) for r in requests])

        def _weights(self, weights: str | None) -> Any:
            if defect == "live_sampler" and weights is not None:
                return self.model.table().detach().clone()
            return super()._weights(weights)

    service = FakeService(strict=False, max_sessions=4, numerics=True, engine_factory=BrokenEngine)
    if defect in EXPIRY:
        expire_idle_after(service, IDLE_TIMEOUT_S)
    return service


def _broken_request(defect: str, request: Any) -> Any:
    """A sample request as the ``defect`` reads it."""
    if defect == "seed_ignored":
        return replace(request, seed=random.randrange(2**31))
    if defect == "stop_ignored":
        return replace(request, stop=())
    if defect == "greedy_ignored" and request.temperature == 0:
        return replace(request, temperature=1.0)
    if defect == "sm_temperature_ignored" and request.temperature != 0:
        return replace(request, temperature=1.0)
    if defect == "max_tokens_ignored":
        return replace(request, max_tokens=request.max_tokens + 3)
    return request


def _answer_500() -> None:
    """Every refusal answered HTTP 500 (its error code kept), for the whole process."""
    from unittest import mock

    from botocore.exceptions import ClientError

    from localsession.client import backend as client_backend

    original = client_backend.call

    def call(operation_name: str, fn: Any) -> Any:
        try:
            return original(operation_name, fn)
        except ClientError as exc:
            exc.response.setdefault("ResponseMetadata", {})["HTTPStatusCode"] = 500
            raise

    mock.patch.object(client_backend, "call", call).start()  # this process exists to break


def _plant_for_the_process(defect: str) -> None:
    """The defects that break the service's own checks or session table, for the whole
    process (it exists to be broken)."""
    from unittest import mock

    from localsession import vocab
    from localsession.runtime import commands
    from localsession.runtime.sessions.lifecycle import Session
    from localsession.runtime.sessions.table import SessionTable
    from localsession.vocab import SessionStatus

    if defect == "refusal_500":
        _answer_500()
    elif defect == "sm_rank_unbounded":
        mock.patch.object(vocab, "LORA_RANK_MAX", 4096).start()
    elif defect == "sm_description_unbounded":
        mock.patch.object(commands, "DESCRIPTION_MAX", 10**9).start()
    elif defect == "sm_never_expires":
        mock.patch.object(SessionTable, "expire_idle", lambda self: None).start()
    elif defect == "sm_activity_ignored":
        mock.patch.object(SessionTable, "expire_idle", _expire_from_creation).start()
    elif defect == "sm_expired_runs_ops":
        checked = Session.require_accepting

        def accepting(self: Session) -> None:  # an Expired session passes the check
            if self.status != SessionStatus.EXPIRED:
                checked(self)

        mock.patch.object(Session, "require_accepting", accepting).start()


_FIRST_SEEN: dict[str, float] = {}


def _expire_from_creation(self: Any) -> None:
    """Expire every session the idle timeout after the table first saw it, ops or not."""
    now = time.monotonic()
    for session in self.all():
        born = _FIRST_SEEN.setdefault(session.name, now)
        if session.running_op is None and now - born > self.config.idle_timeout:
            session.expire()


def _make(defect: str) -> Backend:
    _plant_for_the_process(defect)
    backend = fakes_backend(f"broken-{defect}", _broken_service(defect), xfail="none")
    if defect in EXPIRY:
        backend.limits = replace(backend.limits, idle_timeout_s=IDLE_TIMEOUT_S)
    backend.capabilities = DECLARES.get(defect, frozenset())  # the plugin adds SPEC
    backend.details["defect"] = defect
    return backend


def __getattr__(name: str) -> Any:
    """``--backend=import:conformance.selfcheck:<defect>`` for every defect of EXPECTED."""
    if name in EXPECTED:
        return lambda options: _make(name)
    raise AttributeError(name)


def mean_loss(options: dict[str, Any]) -> Backend:
    return _make("mean_loss")


def reordered(options: dict[str, Any]) -> Backend:
    return _make("reordered")


def dirty_failure(options: dict[str, Any]) -> Backend:
    return _make("dirty_failure")


def live_sampler(options: dict[str, Any]) -> Backend:
    return _make("live_sampler")
