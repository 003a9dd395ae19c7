"""A refusal frees the queue: the SDK numbers every training request of a model
(``seq_id``), and a server runs them in that order, so a request it refused must not leave
a hole that later requests wait behind. The next request after a refusal completes well
inside the server's sequence-gap timeout (``--gap-timeout``, 60 s unless declared)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import datum, forward, needs_sdk, user_error

#: The share of the gap timeout the request after a refusal may take: generous for a loaded
#: server, yet short of the wait a held sequence number would cause.
PROMPT_SHARE = 0.75
#: The least time it is given (a backend with a short or no gap timeout loses nothing to a
#: held number beyond that timeout, so there is nothing shorter to tell apart).
FLOOR_S = 30.0


#: Two refusals: a loss name no server runs (refused when submitted, where servers refuse
#: it), and a datum whose weights do not fit its targets (refused at submit or as a failed
#: request): (loss, weights of the datum, the input the refusal must name).
REFUSALS = {
    "unknown_loss": ("no_such_loss", None, "no_such_loss"),
    "short_weights": ("cross_entropy", [1.0], "weights"),
}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_the_request_after_a_refusal_runs_promptly(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int], refusal: str
) -> None:
    """training_client.py: requests are numbered in submission order (``seq_id``) and a
    refusal (a 4xx or a ``User`` failure: ``_kit.user_error``) fails only itself: the
    model's next request runs at once, not after the gap its number would leave."""
    loss, weights, name = REFUSALS[refusal]
    if refusal == "unknown_loss":
        needs_sdk(backend, "unchecked:ForwardBackwardInput")
    tc = new_trainer(seed=80)
    forward(backend, tc, [datum(backend, tokens)])  # the model is up: its first op is done
    bad = datum(backend, tokens, **({} if weights is None else {"weights": weights}))
    user_error(backend, lambda: tc.forward_backward([bad], loss), name)
    bound = max(PROMPT_SHARE * backend.limits.gap_timeout_s, FLOOR_S)
    future = tc.forward([datum(backend, tokens)], "cross_entropy")
    try:
        out = future.result(timeout=bound)
    except (TimeoutError, concurrent.futures.TimeoutError):
        pytest.fail(
            f"the forward after a refused forward_backward ({refusal}) did not complete "
            f"within {bound:g} s ({PROMPT_SHARE:g} of the {backend.limits.gap_timeout_s:g} s "
            "gap timeout): the refused request's sequence number still holds the queue"
        )
    assert float(out.metrics["loss:sum"]) > 0.0
