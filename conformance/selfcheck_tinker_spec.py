"""More planted defects in localsession's Tinker dialect, one per spec point of the optimizer,
checkpoint, sampling and LoRA tests (``selfcheck_tinker.py`` holds the first ones and plants
these too, through :data:`PATCHES`):

- ``lr_doubled``: ``optim_step`` runs at twice the requested learning rate;
- ``betas_swapped``: ``beta1`` and ``beta2`` trade places;
- ``decay_ignored``: ``weight_decay`` is dropped;
- ``eps_ignored``: ``eps`` is dropped (the server's default of 1e-12 runs);
- ``clip_ignored``: ``grad_clip_norm`` is dropped;
- ``load_keeps_moments``: ``load_state`` (weights only) keeps the old Adam moments;
- ``load_orphans_optimizer``: ``load_state`` leaves an optimizer stepping copies of the
  adapter that the model no longer uses, so training silently stops;
- ``forward_accumulates``: ``forward`` accumulates a gradient, as ``forward_backward`` does;
- ``rank_ignored``: every adapter is created at rank 4 whatever ``LoraConfig.rank`` says;
- ``temperature_ignored``: every sample runs at temperature 1;
- ``temperature_inverted``: a sample runs at 1 / temperature (0 stays greedy);
- ``top_k_ignored``: ``top_k`` is dropped;
- ``max_tokens_ignored``: sequences run 3 tokens past ``max_tokens``;
- ``num_samples_ignored``: one sequence comes back whatever ``num_samples`` asks;
- ``stale_sampler``: a sampler of saved weights (``model_path``) samples the base model;
- ``refusal_keeps_number``: a refused request's sequence number is never released, so the
  next request waits out the gap timeout;
- ``step_deferred``: an ``optim_step`` is applied only after the next forward (or
  forward_backward) has run, which so runs ahead of it;
- ``rank_clamped``: a LoRA rank below 1 is read as 1 instead of being refused;
- ``vocab_wrapped``: target ids past the vocabulary wrap around modulo its size instead of
  being refused;
- ``heartbeat_ignored``: a heartbeat is answered but not recorded, so a session expires its
  heartbeat timeout after its last request however often it beats (planted against the
  short-expiry server of selfcheck_tinker.py, which lists it in ``SHORT_EXPIRY``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from conformance.plant_tools import ORIGINAL, Shapes, bodies, editing

OPT = "test_tinker_optimizer.py::"
TEMP = "test_tinker_temperature.py::"
SAMPLING = "test_tinker_sampling.py::"
LOAD = "test_load_state_resets_the_moments_and_with_optimizer_keeps_them"
EXPECTED: dict[str, set[str]] = {
    "lr_doubled": {OPT + "test_adamw_steps_follow_the_closed_form"},
    "betas_swapped": {OPT + "test_adamw_steps_follow_the_closed_form"},
    "decay_ignored": {OPT + "test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate"},
    "eps_ignored": {OPT + "test_grad_clip_norm_scales_the_global_gradient"},
    "clip_ignored": {OPT + "test_grad_clip_norm_scales_the_global_gradient"},
    "load_keeps_moments": {OPT + LOAD},
    "load_orphans_optimizer": {OPT + LOAD},
    "forward_accumulates": {OPT + "test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate"},
    "rank_ignored": {OPT + "test_the_adapter_has_the_requested_rank[2]"},
    "temperature_ignored": {TEMP + "test_temperature_zero_is_greedy"},
    "temperature_inverted": {
        TEMP + "test_a_temperature_reshapes_the_distribution_as_the_softmax_says"
    },
    "top_k_ignored": {SAMPLING + "test_top_k_one_is_greedy_whatever_the_seed"},
    "max_tokens_ignored": {SAMPLING + "test_max_tokens_bounds_every_sequence[1]"},
    "num_samples_ignored": {SAMPLING + "test_num_samples_sequences_come_back[4]"},
    "stale_sampler": {"test_tinker_training.py::test_sampler_weights_match_the_trainer"},
}


def _adam(edit: Callable[[dict[str, Any]], None]) -> Any:
    """``edit`` sees each optim_step's ``adam_params``."""
    return bodies("/optim_step", lambda body: edit(body.setdefault("adam_params", {})))


def _sampling(edit: Callable[[dict[str, Any]], None]) -> Any:
    """``edit`` sees each asample's ``sampling_params``."""
    return bodies("/asample", lambda body: edit(body.setdefault("sampling_params", {})))


def _doubled(params: dict[str, Any]) -> None:
    params["learning_rate"] = 2 * float(params.get("learning_rate", 1e-4))


def _swapped(params: dict[str, Any]) -> None:
    params["beta1"], params["beta2"] = params.get("beta2", 0.95), params.get("beta1", 0.9)


def _inverted(params: dict[str, Any]) -> None:
    temperature = float(params.get("temperature", 1.0))
    if temperature > 0:
        params["temperature"] = 1.0 / temperature


def _base_sampler(body: dict[str, Any]) -> None:
    if body.get("model_path"):
        from conformance.backends.tinker import LOCAL_MODEL

        body.pop("model_path")
        body["base_model"] = LOCAL_MODEL


@contextlib.contextmanager
def _stale_sampler() -> Iterator[None]:
    with bodies("/create_sampling_session", _base_sampler), bodies("/asample", _base_sampler):
        yield


def _load(keep: bool) -> Any:
    """``load_package`` without the optimizer, then: the old optimizer back (``keep``), or
    one over detached copies of the adapter (training stops)."""
    from localsession.engine.torch_engine import TorchEngine

    original = TorchEngine.load_package

    def load(self: Any, directory: str, *, load_optimizer: bool) -> None:
        old = self._optimizer
        original(self, directory, load_optimizer=load_optimizer)
        if load_optimizer:
            return
        if keep:
            self._optimizer = old
            return
        copies = [
            (name, param.detach().clone().requires_grad_(True))
            for name, param in self._loaded.model.named_parameters()
            if param.requires_grad
        ]
        self._optimizer = type(self._optimizer)(iter(copies))

    return mock.patch.object(TorchEngine, "load_package", load)


def _forward_accumulates() -> Any:
    from localsession.server.tinker.dialect import Dialect

    def patched(self: Any, *args: Any) -> Any:
        model, seq, loss, config, _forward_only, *rest = args
        return ORIGINAL["forward_backward"](self, model, seq, loss, config, False, *rest)

    return mock.patch.object(Dialect, "forward_backward", patched)


PATCHES: dict[str, Callable[[], Any]] = {
    "lr_doubled": lambda: _adam(_doubled),
    "betas_swapped": lambda: _adam(_swapped),
    "decay_ignored": lambda: _adam(lambda p: p.pop("weight_decay", None)),
    "eps_ignored": lambda: _adam(lambda p: p.pop("eps", None)),
    "clip_ignored": lambda: _adam(lambda p: p.pop("grad_clip_norm", None)),
    "load_keeps_moments": lambda: _load(keep=True),
    "load_orphans_optimizer": lambda: _load(keep=False),
    "forward_accumulates": _forward_accumulates,
    "rank_ignored": lambda: bodies(
        "/create_model", lambda body: body.setdefault("lora_config", {}).update(rank=4)
    ),
    "temperature_ignored": lambda: _sampling(lambda p: p.update(temperature=1.0)),
    "temperature_inverted": lambda: _sampling(_inverted),
    "top_k_ignored": lambda: _sampling(lambda p: p.pop("top_k", None)),
    "max_tokens_ignored": lambda: _sampling(
        lambda p: p.update(max_tokens=int(p.get("max_tokens") or 1) + 3)
    ),
    "num_samples_ignored": lambda: bodies("/asample", lambda body: body.update(num_samples=1)),
    "stale_sampler": _stale_sampler,
}


def _numbers_kept() -> Any:
    """A refused request's sequence number is never released: later requests wait for it
    until the gap timeout."""
    from localsession.server.tinker.numbering import Numbering

    return mock.patch.object(Numbering, "_refuse", lambda self, session, number: None)


EXPECTED["refusal_keeps_number"] = {
    "test_tinker_refusals.py::test_the_request_after_a_refusal_runs_promptly[unknown_loss]"
}
PATCHES["refusal_keeps_number"] = _numbers_kept
#: The defects the default suite's meta-test plants (one per spec area); the others, among
#: them refusal_keeps_number whose test waits out a 45 s bound, are planted by the full run
#: (make selfcheck) and the slow tier.
FAST = frozenset({"lr_doubled", "load_keeps_moments", "temperature_ignored", "rank_ignored"})


def _deferred_step() -> Any:
    """An optim_step is answered at once but applied only after the model's next forward or
    forward_backward has run: that request runs ahead of the step queued before it."""
    from localsession.engine.torch_engine import TorchEngine
    from localsession.port_results import OptimResult

    run_forward, run_step = TorchEngine.forward_backward, TorchEngine.optim_step
    pending: dict[int, Any] = {}

    def optim_step(self: Any, adam_params: Any) -> Any:
        pending[id(self)] = adam_params
        return OptimResult({"learning_rate": float(adam_params.learning_rate)})

    def forward_backward(self: Any, *args: Any, **kw: Any) -> Any:
        out = run_forward(self, *args, **kw)
        held = pending.pop(id(self), None)
        if held is not None:
            run_step(self, held)
        return out

    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(TorchEngine, "optim_step", optim_step))
    stack.enter_context(mock.patch.object(TorchEngine, "forward_backward", forward_backward))
    return stack


EXPECTED["step_deferred"] = {
    "test_tinker_ordering.py::test_each_queued_request_sees_exactly_the_requests_before_it"
}
PATCHES["step_deferred"] = _deferred_step


def _clamped_rank(body: dict[str, Any]) -> None:
    lora = body.setdefault("lora_config", {})
    if int(lora.get("rank", 1)) < 1:
        lora["rank"] = 1


def _wrapped_targets(datums: list[Any], shapes: Shapes) -> tuple[list[Any], Shapes]:
    """``target_tokens`` taken modulo the model's vocabulary (every id then embeds)."""
    from conformance.backends.tinker import LOCAL_MODEL
    from localsession.engine.builtin_files import vocab_size

    size = vocab_size(LOCAL_MODEL)
    wrapped = []
    for datum in datums:
        inputs = dict(datum.loss_fn_inputs)
        if "target_tokens" in inputs:
            inputs["target_tokens"] = [int(t) % size for t in inputs["target_tokens"]]
        wrapped.append(replace(datum, loss_fn_inputs=inputs))
    return wrapped, shapes


def _unrecorded_heartbeat() -> Any:
    """``Dialect.heartbeat`` answers as before but no longer refreshes the session."""
    from localsession.server.tinker.dialect import Dialect

    def heartbeat(self: Any, session_id: str) -> bool:
        with self.lock:
            return session_id not in self.finished

    return mock.patch.object(Dialect, "heartbeat", heartbeat)


def _vocab_wrapped() -> Any:
    from localsession.server.tinker.dialect import Dialect

    return mock.patch.object(Dialect, "forward_backward", editing(_wrapped_targets))


ERRORS = "test_tinker_errors.py::"
EXPECTED["rank_clamped"] = {ERRORS + "test_a_nonpositive_rank_is_refused[0]"}
PATCHES["rank_clamped"] = lambda: bodies("/create_model", _clamped_rank)
EXPECTED["vocab_wrapped"] = {ERRORS + "test_a_target_beyond_the_vocabulary_is_refused"}
PATCHES["vocab_wrapped"] = _vocab_wrapped
EXPECTED["heartbeat_ignored"] = {
    "test_tinker_sessions.py::test_a_session_whose_heartbeats_stop_expires"
}
PATCHES["heartbeat_ignored"] = _unrecorded_heartbeat
SLOW = frozenset(EXPECTED) - FAST - {"step_deferred", "rank_clamped", "vocab_wrapped"}
