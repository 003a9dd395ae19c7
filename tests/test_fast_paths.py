"""The fast paths cannot change a result: a training loop run with every fast path on, and
again with every one declining (so the exact path decides every request), gives byte-identical
results, and the fast paths took part (counted, so the comparison is not vacuous). A planted
fast path that changes one value makes the comparison fail: it would catch a real one.

The fast paths, each a module beside its exact one: ``client/param_check_fast.py`` (the
strict client's check and copy of a request), ``runtime/wire_datums_fast.py`` (a wire
``datumList`` read into port datums) and ``engine/batch_fast.py`` (port datums padded
into one batch).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData
from localsession.client import param_check, param_check_fast
from localsession.engine import batch_fast
from localsession.runtime import wire_datums_fast
from localsession.runtime.service import Service

MODEL = "localsession/tiny"
ROLE = "arn:aws:iam::000000000000:role/fast-paths"
#: Metrics measured on the wall clock (engine/flops.py): they differ between any two runs.
WALL_CLOCK = frozenset({"mfu"})


def _untimed(metrics: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metrics.items() if key not in WALL_CLOCK}


def _datum(tokens: list[int], **extra: list[float]) -> Datum:
    inputs = {
        "target_tokens": TensorData(data=tokens[1:] + [0], dtype="int64"),
        "weights": TensorData(data=[1.0] * (len(tokens) - 1) + [0.5]),
        **{key: TensorData(data=values) for key, values in extra.items()},
    }
    return Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


def _loop(service: Service) -> bytes:
    """forward_backward (two losses), optim_step and forward on a fixed-seed session: every
    value the client got back (but the wall-clock ones), as JSON bytes."""
    client = ServiceClient("us-west-2", role_arn=ROLE, backend=service, strict=True)
    batch = [_datum([1, 72, 101, 108, 108, 111]), _datum([1, 87, 111, 114])]
    ratio = [
        _datum([1, 5, 9, 13], advantages=[0.5, -1.0, 2.0, 0.0], logprobs=[-2.0, -3.0, -1.5, -4.0])
    ]
    out: list[Any] = []
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        for _ in range(2):
            first = tc.forward_backward(batch).result(timeout=120)
            second = tc.forward_backward(ratio, loss_fn="importance_sampling").result(timeout=120)
            step = tc.optim_step(AdamParams(learning_rate=1e-2)).result(timeout=120)
            out += [_untimed(first.metrics), first.loss_fn_outputs]
            out += [_untimed(second.metrics), second.loss_fn_outputs, step.metrics]
        after = tc.forward(batch).result(timeout=120)
        out += [_untimed(after.metrics), after.loss_fn_outputs]
    return json.dumps(out, sort_keys=True, default=repr).encode()


@contextmanager
def _counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Count the requests each fast path decided itself (returned a value, not declined)."""
    taken = {"param_check": 0, "wire_datums": 0, "batch": 0}
    conformer, plain, batched = (
        param_check_fast.conformer,
        wire_datums_fast.plain_datum,
        batch_fast.batched,
    )

    def counting_conformer(shape: Any) -> Callable[[Any], Any]:
        conform = conformer(shape)

        def run(params: Any) -> Any:
            copied = conform(params)
            taken["param_check"] += 1
            return copied

        return run

    def counting(name: str, fast: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            answer = fast(*args)
            taken[name] += answer is not None
            return answer

        return run

    monkeypatch.setattr(param_check_fast, "conformer", counting_conformer)
    monkeypatch.setattr(wire_datums_fast, "plain_datum", counting("wire_datums", plain))
    monkeypatch.setattr(batch_fast, "batched", counting("batch", batched))
    yield taken


def _exact_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast path declines: the exact path decides every request."""

    def unproven(shape: Any) -> Callable[[Any], Any]:
        def run(params: Any) -> Any:
            raise param_check_fast.Unproven

        return run

    monkeypatch.setattr(param_check_fast, "conformer", unproven)
    monkeypatch.setattr(wire_datums_fast, "plain_datum", lambda *args: None)
    monkeypatch.setattr(batch_fast, "batched", lambda *args: None)


def test_the_fast_paths_change_no_result(service: Service) -> None:
    with pytest.MonkeyPatch.context() as patch, _counted(patch) as taken:
        fast = _loop(service)
    assert all(count > 0 for count in taken.values()), taken  # each one took part
    with pytest.MonkeyPatch.context() as patch:
        _exact_only(patch)
        exact_calls: list[int] = []
        real_check = param_check.check
        patch.setattr(param_check, "check", lambda *a: exact_calls.append(1) or real_check(*a))
        exact = _loop(service)
    assert exact_calls  # the exact path did decide, here
    assert fast == exact


def test_a_planted_fast_path_that_changes_a_value_is_caught(service: Service) -> None:
    """The comparison above is sensitive: a fast batch with one weight nudged differs."""
    baseline = _loop(service)
    real = batch_fast.batched

    def nudged(*args: Any) -> Any:
        built = real(*args)
        if built is not None:
            built.weights_BT = built.weights_BT.clone()
            built.weights_BT[0, 0] += torch.tensor(1e-3)
        return built

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_fast, "batched", nudged)
        planted = _loop(service)
    assert planted != baseline
