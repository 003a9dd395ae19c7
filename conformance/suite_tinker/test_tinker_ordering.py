"""Ordering with ops really queued together: a trainer's requests are submitted in one go,
none waited for, so the server holds several at once; each result must reflect exactly the
requests submitted before it, as a twin trainer (same ``LoraConfig.seed``) that waits for
each request before the next one shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import adam, datum, wait

#: The requests, in submission order: forward (f), forward_backward (b), optim_step (o).
SCRIPT = "fboffbofbo" + "f"


def _run(backend: Backend, tc: Any, tokens: list[int], pipelined: bool) -> list[list[float]]:
    """Each forward's and forward_backward's logprobs, in order."""
    data = [datum(backend, tokens)]
    futures = []
    for kind in SCRIPT:
        if kind == "o":
            future = tc.optim_step(adam(backend))
        else:
            call = tc.forward if kind == "f" else tc.forward_backward
            future = call(data, "cross_entropy")
        if not pipelined:
            wait(future, backend)
        futures.append((kind, future))
    outs = [(kind, wait(future, backend)) for kind, future in futures]
    return [
        [float(v) for v in out.loss_fn_outputs[0]["logprobs"].tolist()]
        for kind, out in outs
        if kind != "o"
    ]


def test_each_queued_request_sees_exactly_the_requests_before_it(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py (the class example): "Submit the requests that follow before
    waiting"; the server runs a model's requests in submission order (``seq_id``), so every
    forward and forward_backward of the queued script (forward, forward_backward, optim_step,
    forward, forward, forward_backward, optim_step, ...) scores the weights of exactly the
    optim_steps before it, as the same script waited request by request does."""
    piped = _run(backend, new_trainer(seed=90), tokens, pipelined=True)
    waited = _run(backend, new_trainer(seed=90), tokens, pipelined=False)
    atol = backend.limits.logprob_atol
    positions = [j for j, kind in enumerate(SCRIPT) if kind != "o"]
    steps = [SCRIPT[:j].count("o") for j in positions]  # optim_steps before each
    for i, (got, want) in enumerate(zip(piped, waited, strict=True)):
        name = "forward" if SCRIPT[positions[i]] == "f" else "forward_backward"
        assert got == pytest.approx(want, abs=atol), (
            f"request {i} ({name}, after {steps[i]} optim_steps) queued with the others scored "
            "other weights than when each request was waited for: the server ran queued "
            "requests out of submission order"
        )
    for run, label in ((piped, "queued"), (waited, "waited")):
        for i in range(1, len(run)):
            moved = run[i] != pytest.approx(run[i - 1], abs=atol)
            assert moved == (steps[i] > steps[i - 1]), (
                f"{label}: request {i} (after {steps[i]} optim_steps) scored "
                + ("other weights than" if moved else "the same weights as")
                + f" request {i - 1} (after {steps[i - 1]}): a request must see exactly the "
                "optim_steps submitted before it, no fewer, no more"
            )
