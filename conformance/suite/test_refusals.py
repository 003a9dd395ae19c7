"""A refusal fails only itself, with a 4xx, and frees the queue (docs/wire.md#5,
docs/semantics.md#4): an op refused at submit used its sequence number, so the session's
next op runs at once instead of waiting out the gap its number would leave."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, result, sft

#: The share of the gap timeout the op after a refusal may take: generous for a loaded
#: server, short of the wait a held sequence number causes.
PROMPT_SHARE = 0.75
#: The least time it is given (a backend with a short or no gap timeout loses nothing to a
#: held number beyond that timeout, so there is nothing shorter to tell apart).
FLOOR_S = 30.0


def test_the_op_after_a_refusal_runs_promptly(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    """An empty batch is refused (a ClientError with a 4xx status, or a failed op); the
    forward submitted right after it completes within 0.75 x the gap timeout (at least 30 s)."""
    result(training_client.forward([sft(ts, TEXT_A)], "cross_entropy"), backend)  # up
    refused = training_client.forward_backward([], "cross_entropy")
    later = training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    with pytest.raises((ClientError, ts.OperationError)) as info:
        result(refused, backend)
    if isinstance(info.value, ClientError):
        status = (info.value.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        assert isinstance(status, int) and 400 <= status < 500, (
            f"a refused empty batch is answered with a 4xx HTTP status, not {status}"
        )
    bound = max(PROMPT_SHARE * backend.limits.gap_timeout_s, FLOOR_S)
    try:
        out = later.result(timeout=bound)
    except (TimeoutError, concurrent.futures.TimeoutError):
        pytest.fail(
            f"the forward after a refused forward_backward did not complete within {bound:g} s "
            f"({PROMPT_SHARE:g} of the {backend.limits.gap_timeout_s:g} s gap timeout): the "
            "refused op's sequence number still holds the queue"
        )
    assert len(out.loss_fn_outputs) == 1
