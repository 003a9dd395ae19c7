"""Deliberately broken Tinker servers, for the meta-test that proves ``suite_tinker/`` can
fail: localsession's own dialect with one planted defect.

- ``loss_sign``: ``forward_backward`` runs every datum with its weights negated, so the
  reported loss has the wrong sign and training climbs the loss;
- ``seed_ignored``: ``asample`` replaces each request's seed with a random one;
- ``optim_noop``: ``optim_step`` runs with a learning rate of 1e-30 (never moves a weight);
- ``logprob_shift``: sampled tokens' logprobs come back 0.1 higher;
- ``stop_ignored``: ``asample`` drops the request's stop strings and token ids;
- ``optimizer_dropped``: ``load_state_with_optimizer`` loads the weights only.

Each patch is a context manager (:func:`planted`), so a test can plant and lift it around a
call on a shared server; ``--backend=import:conformance.selfcheck_tinker:<name>`` starts the
loopback dialect with it planted for the whole run. :data:`EXPECTED` names the tests each
defect must make fail; :func:`run_test` calls one suite test by id outside pytest.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from conformance.adapter import Backend

SHIFT = 0.1
TRAINING = "test_tinker_training.py::"
SAMPLING = "test_tinker_sampling.py::"
EXPECTED: dict[str, set[str]] = {
    "loss_sign": {
        TRAINING + "test_cross_entropy_loss_sum_is_the_weighted_nll",
        TRAINING + "test_only_optim_step_changes_the_weights",
    },
    "seed_ignored": {SAMPLING + "test_seeded_sampling_is_reproducible"},
    "optim_noop": {
        TRAINING + "test_only_optim_step_changes_the_weights",
        TRAINING + "test_queued_ops_run_in_submission_order",
    },
    "logprob_shift": {SAMPLING + "test_sampled_logprobs_match_compute_logprobs"},
    "stop_ignored": {SAMPLING + "test_a_stop_token_id_ends_the_sequence"},
    "optimizer_dropped": {TRAINING + "test_save_and_load_state_round_trip"},
}


def _sampling_params(edit: Callable[[dict[str, Any]], None]) -> Any:
    """Patch the routes' body reader so that ``edit`` sees each asample's sampling params."""
    from localsession.server.tinker import routes

    original = routes.body_json

    async def read(request: Any) -> dict[str, Any]:
        body = await original(request)
        if request.url.path.endswith("/asample"):
            edit(body.setdefault("sampling_params", {}))
        return body

    return mock.patch.object(routes, "body_json", read)


def _negated_weights(self: Any, *args: Any) -> Any:
    *head, datums = args
    flipped = []
    for datum in datums:
        inputs = dict(datum.loss_fn_inputs)
        if "weights" in inputs:
            inputs["weights"] = [-float(w) for w in inputs["weights"]]
        elif "target_tokens" in inputs:
            inputs["weights"] = [-1.0] * len(inputs["target_tokens"])
        flipped.append(replace(datum, loss_fn_inputs=inputs))
    return _ORIGINAL["forward_backward"](self, *head, flipped)


def _frozen_step(self: Any, request: dict[str, Any]) -> Any:
    params = dict(request.get("adam_params") or {})
    params["learning_rate"] = 1e-30
    return _ORIGINAL["optim_step"](self, {**request, "adam_params": params})


def _weights_only(self: Any, request: dict[str, Any]) -> Any:
    return _ORIGINAL["load"](self, {**request, "optimizer": False})


def _shifted(result: Any, *args: Any) -> bytes:
    sequences = [replace(s, logprobs=[v + SHIFT for v in s.logprobs]) for s in result.sequences]
    return _ORIGINAL["encode_sample_response"](replace(result, sequences=sequences), *args)


_ORIGINAL: dict[str, Callable[..., Any]] = {}
_HELD: list[Any] = []


@contextlib.contextmanager
def planted(defect: str) -> Iterator[None]:
    """Plant ``defect`` in the Tinker dialect (this process's servers) while inside."""
    from localsession.server.tinker import codec
    from localsession.server.tinker.dialect import Dialect

    if not _ORIGINAL:  # the unbroken functions, whatever is planted later
        _ORIGINAL.update(
            forward_backward=Dialect.forward_backward,
            optim_step=Dialect.optim_step,
            load=Dialect.load,
            encode_sample_response=codec.encode_sample_response,
        )
    patches = {
        "loss_sign": lambda: mock.patch.object(Dialect, "forward_backward", _negated_weights),
        "seed_ignored": lambda: _sampling_params(lambda p: p.update(seed=random.randrange(2**31))),
        "optim_noop": lambda: mock.patch.object(Dialect, "optim_step", _frozen_step),
        "logprob_shift": lambda: mock.patch.object(codec, "encode_sample_response", _shifted),
        "stop_ignored": lambda: _sampling_params(lambda p: p.pop("stop", None)),
        "optimizer_dropped": lambda: mock.patch.object(Dialect, "load", _weights_only),
    }
    if defect not in patches:
        raise KeyError(f"no planted defect {defect!r}; known: {', '.join(sorted(patches))}")
    with patches[defect]():
        yield


def run_test(test_id: str, backend: Backend, client: Any) -> None:
    """Call one ``suite_tinker`` test (``file.py::name[param]``) with hand-built fixtures;
    it raises what it would raise under pytest."""
    import importlib

    from conformance.suite_tinker._kit import wait

    path, _, name = test_id.partition("::")
    name, _, param = name.partition("[")
    module = importlib.import_module(f"conformance.suite_tinker.{path[: -len('.py')]}")
    test = getattr(module, name)

    def new_trainer(**kwargs: Any) -> Any:
        kwargs.setdefault("rank", backend.limits.rank)
        return client.create_lora_training_client(backend.base_model, **kwargs)

    values: dict[str, Any] = {
        "backend": backend,
        "tinker_client": client,
        "new_trainer": new_trainer,
        "tokens": [*backend.prompt, 32, 119, 111, 114, 108, 100],
        "loss_fn": param.rstrip("]"),
    }
    if "sampler" in inspect.signature(test).parameters:
        values["sampler"] = wait(
            client.create_sampling_client(base_model=backend.base_model), backend
        )
    test(**{key: values[key] for key in inspect.signature(test).parameters})


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
