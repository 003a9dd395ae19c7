"""Token accounting, where declared: ``BillableTokenUsage`` per session (docs/semantics.md#6,
docs/wire.md#10 "Billing")."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, params, result, sft

pytestmark = pytest.mark.requires("accounting.tokens")


def _usage(backend: Backend, tc: Any) -> dict[str, int]:
    assert backend.billable_usage is not None
    return backend.billable_usage(tc.training_session_name)


def test_training_tokens_count_every_position(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    assert _usage(backend, training_client)["TrainingTokenCount"] == 0
    result(training_client.forward_backward([sft(ts, TEXT_A), sft(ts, TEXT_B)]), backend)
    result(training_client.forward([sft(ts, TEXT_B)]), backend)
    assert _usage(backend, training_client)["TrainingTokenCount"] == len(TEXT_A) + 2 * len(TEXT_B)


def test_sampling_tokens_count_prefill_and_decode(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    sampler = training_client.create_sampling_client()
    prompt = list(backend.prompt)
    out = result(
        sampler.sample(ts.ModelInput.from_ints(prompt), 3, params(backend, ts, 5, seed=2)), backend
    )
    result(sampler.compute_logprobs(list(TEXT_A)), backend)
    usage = _usage(backend, training_client)
    assert usage["SampleTokenCount"] == sum(len(s.tokens) for s in out.sequences)
    assert usage["PrefillTokenCount"] == 3 * len(prompt) + len(TEXT_A)
    assert usage["TrainingTokenCount"] == 0
