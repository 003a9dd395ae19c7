"""Deliberately broken Tinker servers, for the meta-test that proves ``suite_tinker/`` can
fail: localsession's own dialect with one planted defect.

- ``loss_sign``: ``forward_backward`` runs every datum with its weights negated, so the
  reported loss has the wrong sign and training climbs the loss;
- ``seed_ignored``: ``asample`` replaces each request's seed with a random one;
- ``optim_noop``: ``optim_step`` runs with a learning rate of 1e-30 (never moves a weight);
- ``logprob_shift``: sampled tokens' logprobs come back 0.1 higher;
- ``stop_ignored``: ``asample`` drops the request's stop strings and token ids;
- ``optimizer_dropped``: ``load_state_with_optimizer`` loads the weights only;
- ``targets_flattened``: 2-D ``(N, K)`` ``target_tokens``/``weights`` lose their shape and
  arrive as N*K flat values;
- ``empty_stop_ignored``: ``stop=[]`` is read as ``stop=None`` (EOS still stops);
- ``lora_unseeded``: ``create_model`` replaces ``lora_config.seed`` with a random one;
- ``crash_as_validation``: the datum length check is gone, and the engine's shape crash
  (a torch broadcasting message) comes back as a failed request of category ``User``.
- ``never_expires``: the heartbeat-expiry sweep (server/tinker/expiry.py) expires nothing,
  so a session whose heartbeats stopped lives on. Its test runs against a server started
  with a short heartbeat timeout (:func:`short_expiry_backend`).

Each patch is a context manager (:func:`planted`), so a test can plant and lift it around a
call on a shared server; ``--backend=import:conformance.selfcheck_tinker:<name>`` starts the
loopback dialect with it planted for the whole run. :data:`EXPECTED` names the tests each
defect must make fail; :func:`run_test` calls one suite test by id outside pytest.

Length: one catalogue of defects; each defect's patch, its expected failures and its backend
factory stay in this one file, so planting a new defect touches nothing else.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from conformance.adapter import Backend
from conformance.plant_tools import ORIGINAL, Shapes, bodies, editing, remember_originals
from conformance.selfcheck_tinker_spec import EXPECTED as SPEC_EXPECTED

SHIFT = 0.1
#: The inputs a (N, K) cross-entropy datum carries per target (``flattened_targets``).
TARGET_KEYS = ("target_tokens", "weights")
TRAINING = "test_tinker_training.py::"
SAMPLING = "test_tinker_sampling.py::"
LOSSES = "test_tinker_losses.py::"
TWO_D = "test_tinker_targets2d.py::"
#: The torch message of a broadcasting crash: it says "size" and "match", names no input.
CRASH = (
    "The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton dimension 0"
)
EXPECTED: dict[str, set[str]] = {
    "loss_sign": {
        LOSSES + "test_cross_entropy_loss_sum_is_the_weighted_nll",
        TRAINING + "test_only_optim_step_changes_the_weights",
    },
    "seed_ignored": {SAMPLING + "test_seeded_sampling_is_reproducible"},
    "optim_noop": {
        TRAINING + "test_only_optim_step_changes_the_weights",
        TRAINING + "test_queued_ops_run_in_submission_order",
    },
    "logprob_shift": {SAMPLING + "test_sampled_logprobs_match_compute_logprobs"},
    "stop_ignored": {SAMPLING + "test_a_stop_token_id_ends_the_sequence"},
    "optimizer_dropped": {
        "test_tinker_checkpoints.py::test_resume_with_optimizer_continues_bit_for_bit"
    },
    "targets_flattened": {
        TWO_D + "test_2d_cross_entropy_is_the_weighted_sum_over_candidates",
        TWO_D + "test_2d_logprobs_output_has_the_targets_shape",
    },
    "empty_stop_ignored": {SAMPLING + "test_stop_none_keeps_eos_and_an_empty_list_disables_it"},
    "lora_unseeded": {
        "test_tinker_sessions.py::test_a_lora_seed_makes_initialisation_reproducible"
    },
    "crash_as_validation": {
        "test_tinker_errors.py::test_mismatched_target_tokens_are_refused_by_name"
    },
    "never_expires": {"test_tinker_sessions.py::test_a_session_whose_heartbeats_stop_expires"},
}
EXPECTED.update(SPEC_EXPECTED)  # selfcheck_tinker_spec.py: optimizer, checkpoint, sampling
#: Defects whose test needs a server that declares a short heartbeat timeout.
SHORT_EXPIRY = {"never_expires", "heartbeat_ignored"}
#: That timeout, in seconds: the expiry test then waits 1.5 x this + 5 s.
SHORT_EXPIRY_S = 2.0


def _sampling_params(edit: Callable[[dict[str, Any]], None]) -> Any:
    """``edit`` sees each asample's sampling params."""
    return bodies("/asample", lambda body: edit(body.setdefault("sampling_params", {})))


def _empty_stop_as_none(params: dict[str, Any]) -> None:
    if params.get("stop") == []:
        params.pop("stop")


def _random_lora_seed(body: dict[str, Any]) -> None:
    body.setdefault("lora_config", {})["seed"] = random.randrange(2**31)


def _flattened_targets(datums: list[Any], shapes: Shapes) -> tuple[list[Any], Shapes]:
    """(N, K) targets and weights read as N*K flat values, as a server that ignores
    ``TensorData.shape`` would."""
    flat = [
        {k: [math.prod(v)] if k in TARGET_KEYS and len(v) > 1 else v for k, v in shape.items()}
        for shape in shapes
    ]
    return datums, flat


def _crashing_column(index: int, key: str, data: list[Any], length: int) -> list[Any]:
    """The length check replaced by the crash the engine would hit without it."""
    if len(data) != length:
        raise RuntimeError(CRASH.format(a=len(data), b=length))
    return data


def _crash_as_validation() -> Any:
    from localsession.numerics import inputs  # every engine reads the check from there

    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(inputs, "column_data", _crashing_column))
    return stack


def _negated_weights(datums: list[Any], shapes: Shapes) -> tuple[list[Any], Shapes]:
    """Every weight negated (absent weights: all -1)."""
    flipped, flipped_shapes = [], []
    for datum, shape in zip(datums, shapes, strict=True):
        inputs, shape = dict(datum.loss_fn_inputs), dict(shape)
        if "weights" in inputs:
            inputs["weights"] = [-float(w) for w in inputs["weights"]]
        elif "target_tokens" in inputs:
            inputs["weights"] = [-1.0] * len(inputs["target_tokens"])
            shape["weights"] = shape["target_tokens"]
        flipped.append(replace(datum, loss_fn_inputs=inputs))
        flipped_shapes.append(shape)
    return flipped, flipped_shapes


def _frozen_step(self: Any, request: dict[str, Any]) -> Any:
    params = dict(request.get("adam_params") or {})
    params["learning_rate"] = 1e-30
    return ORIGINAL["optim_step"](self, {**request, "adam_params": params})


def _weights_only(self: Any, request: dict[str, Any]) -> Any:
    return ORIGINAL["load"](self, {**request, "optimizer": False})


def _shifted(result: Any, *args: Any) -> bytes:
    sequences = [replace(s, logprobs=[v + SHIFT for v in s.logprobs]) for s in result.sequences]
    return ORIGINAL["encode_sample_response"](replace(result, sequences=sequences), *args)


#: Fixtures run_test builds by hand (conftest.py's, and the modules' ``trainer``).
FIXTURES = ("backend", "tinker_client", "new_trainer", "tokens", "sampler", "trainer")
_HELD: list[Any] = []


@contextlib.contextmanager
def planted(defect: str) -> Iterator[None]:
    """Plant ``defect`` in the Tinker dialect (this process's servers) while inside."""
    from localsession.server.tinker import codec, expiry
    from localsession.server.tinker.dialect import Dialect

    remember_originals()
    patches = {
        "loss_sign": lambda: mock.patch.object(
            Dialect, "forward_backward", editing(_negated_weights)
        ),
        "seed_ignored": lambda: _sampling_params(lambda p: p.update(seed=random.randrange(2**31))),
        "optim_noop": lambda: mock.patch.object(Dialect, "optim_step", _frozen_step),
        "logprob_shift": lambda: mock.patch.object(codec, "encode_sample_response", _shifted),
        "stop_ignored": lambda: _sampling_params(lambda p: p.pop("stop", None)),
        "optimizer_dropped": lambda: mock.patch.object(Dialect, "load", _weights_only),
        "targets_flattened": lambda: mock.patch.object(
            Dialect, "forward_backward", editing(_flattened_targets)
        ),
        "empty_stop_ignored": lambda: _sampling_params(_empty_stop_as_none),
        "lora_unseeded": lambda: bodies("/create_model", _random_lora_seed),
        "crash_as_validation": _crash_as_validation,
        # expiry.sweep expires nothing and answers "nothing left to watch" (its thread ends)
        "never_expires": lambda: mock.patch.object(expiry, "sweep", return_value=False),
    }
    from conformance.selfcheck_tinker_spec import PATCHES

    patches.update(PATCHES)
    if defect not in patches:
        raise KeyError(f"no planted defect {defect!r}; known: {', '.join(sorted(patches))}")
    with patches[defect]():
        yield


def run_test(test_id: str, backend: Backend, client: Any) -> None:
    """Call one ``suite_tinker`` test (``file.py::name[param]``) with hand-built fixtures;
    it raises what it would raise under pytest."""
    import importlib

    from conformance.suite_tinker._kit import text_tokens, wait

    path, _, name = test_id.partition("::")
    name, _, param = name.partition("[")
    module = importlib.import_module(f"conformance.suite_tinker.{path[: -len('.py')]}")
    test = getattr(module, name)

    def new_trainer(**kwargs: Any) -> Any:
        kwargs.setdefault("rank", backend.limits.rank)
        return wait(client.create_lora_training_client(backend.base_model, **kwargs), backend)

    wanted = inspect.signature(test).parameters
    values: dict[str, Any] = {
        "backend": backend,
        "tinker_client": client,
        "new_trainer": new_trainer,
        "tokens": text_tokens(backend),
    }
    if param:  # a parametrized test: its one parameter takes the id's value
        (name_of_param,) = [p for p in wanted if p not in values and p not in FIXTURES]
        values[name_of_param] = _literal(param.rstrip("]"))
    if "sampler" in wanted:
        values["sampler"] = wait(
            client.create_sampling_client(base_model=backend.base_model), backend
        )
    if "trainer" in wanted:
        values["trainer"] = new_trainer(seed=0)
    test(**{key: values[key] for key in wanted})


def _literal(raw: str) -> Any:
    """A pytest id's parameter back as the value: int, float, else the string."""
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(raw)
    return raw


def _make(defect: str, options: dict[str, Any]) -> Backend:
    from conformance.backends.tinker import make_tinker

    held = planted(defect)
    held.__enter__()  # for the whole run: this process exists to be broken
    _HELD.append(held)  # (a collected context manager would lift the patch)
    os.environ.pop("TINKER_BASE_URL", None)  # always the loopback dialect, never a URL
    backend = make_tinker({**options, "base_url": None})
    backend.name = f"tinker-broken-{defect}"
    backend.details["defect"] = defect
    return backend


def loss_sign(options: dict[str, Any]) -> Backend:
    return _make("loss_sign", options)


def seed_ignored(options: dict[str, Any]) -> Backend:
    return _make("seed_ignored", options)


def optim_noop(options: dict[str, Any]) -> Backend:
    return _make("optim_noop", options)


def logprob_shift(options: dict[str, Any]) -> Backend:
    return _make("logprob_shift", options)


def stop_ignored(options: dict[str, Any]) -> Backend:
    return _make("stop_ignored", options)


def optimizer_dropped(options: dict[str, Any]) -> Backend:
    return _make("optimizer_dropped", options)


def targets_flattened(options: dict[str, Any]) -> Backend:
    return _make("targets_flattened", options)


def empty_stop_ignored(options: dict[str, Any]) -> Backend:
    return _make("empty_stop_ignored", options)


def lora_unseeded(options: dict[str, Any]) -> Backend:
    return _make("lora_unseeded", options)


def crash_as_validation(options: dict[str, Any]) -> Backend:
    return _make("crash_as_validation", options)


def __getattr__(name: str) -> Callable[[dict[str, Any]], Backend]:
    """``--backend=import:conformance.selfcheck_tinker:<defect>`` for the defects of
    selfcheck_tinker_spec.py, which have no factory function of their own here."""
    if name in SPEC_EXPECTED:
        make = _make_expiring if name in SHORT_EXPIRY else _make
        return lambda options: make(name, options)
    raise AttributeError(name)


def short_expiry_backend(options: dict[str, Any]) -> Backend:
    """The loopback backend, its expiry test aimed at a second loopback server that expires
    sessions after :data:`SHORT_EXPIRY_S` (declared as its heartbeat timeout). The probe's
    model stays on the first server: its load can outlast so short a timeout, and no
    request of a loading model's session counts as its heartbeat before the SDK's first
    beat at 10 s."""
    from conformance.backends.tinker import EXPIRY_ENV, make_tinker
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import TinkerServer

    with scoped_environ({EXPIRY_ENV: str(SHORT_EXPIRY_S)}):
        expiring = TinkerServer(engine="torch")
    with contextlib.ExitStack() as on_failure:  # the second server closes if this fails
        on_failure.callback(expiring.close)
        backend = make_tinker({**options, "base_url": None, "heartbeat_timeout": None})
        on_failure.pop_all()
    first_close = backend.close

    def close() -> None:
        first_close()
        expiring.close()

    backend.details = {**backend.details, "base_url": expiring.url}
    backend.limits = replace(backend.limits, heartbeat_timeout_s=SHORT_EXPIRY_S)
    backend.close = close
    return backend


def _make_expiring(defect: str, options: dict[str, Any]) -> Backend:
    """A defect of :data:`SHORT_EXPIRY`, planted against :func:`short_expiry_backend`."""
    held = planted(defect)
    held.__enter__()
    _HELD.append(held)
    os.environ.pop("TINKER_BASE_URL", None)
    backend = short_expiry_backend(options)
    backend.name = f"tinker-broken-{defect}"
    backend.details["defect"] = defect
    return backend


def never_expires(options: dict[str, Any]) -> Backend:
    return _make_expiring("never_expires", options)


#: What a pydantic server that predates ``optimizer_config`` answers tinker 0.38's
#: create_model with (TuFT 0.2.2 does, HTTP 422).
WIRE_REFUSAL = {
    "detail": [
        {
            "type": "extra_forbidden",
            "loc": ["body", "optimizer_config"],
            "msg": "Extra inputs are not permitted",
            "input": {"type": "adamw"},
        }
    ]
}


@contextlib.contextmanager
def older_wire() -> Iterator[None]:
    """The dialect answering ``create_model`` as a server of an older wire does."""
    from starlette.responses import JSONResponse

    from localsession.server.tinker.routes import TinkerRoutes

    async def refuse(self: Any, request: Any) -> Any:
        return JSONResponse(WIRE_REFUSAL, status_code=422)

    with mock.patch.object(TinkerRoutes, "create_model", refuse):
        yield


def wire_mismatch(options: dict[str, Any]) -> Backend:
    """``--backend=import:conformance.selfcheck_tinker:wire_mismatch``: the loopback dialect
    refusing tinker 0.38's ``optimizer_config`` (the run must stop with one message)."""
    from conformance.backends.tinker import make_tinker

    held = older_wire()
    held.__enter__()
    _HELD.append(held)
    os.environ.pop("TINKER_BASE_URL", None)
    return make_tinker({**options, "base_url": None})
