"""Validation and limits: exception types and error codes, never message text
(docs/wire.md#5, #7,
#8, #10; docs/semantics.md#4)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, adam, result, sft


@pytest.fixture
def strict_training_client(backend: Backend, new_training_client: Any) -> Any:
    if backend.strict_client is None or not backend.has("limits.strict"):
        pytest.skip(f"backend {backend.name} does not declare capability 'limits.strict'")
    return new_training_client(backend.strict_client())


def _code(exc: BaseException) -> str:
    """The error code of a refusal, which must also be a 4xx on the wire: a 5xx is the
    server's fault (and the SDK retries it for minutes before it reports the code)."""
    assert isinstance(exc, ClientError), repr(exc)
    code = str(exc.response["Error"]["Code"])
    status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    assert isinstance(status, int) and 400 <= status < 500, (
        f"a refusal ({code}) is answered with a 4xx HTTP status, not {status}"
    )
    return code


def test_unknown_loss_fn_raises_at_the_call(ts: Any, shared_training_client: Any) -> None:
    with pytest.raises(ValueError):
        shared_training_client.forward_backward([sft(ts, TEXT_A)], "mean_squared_error")


def test_missing_required_loss_input_raises_at_the_call(
    ts: Any, shared_training_client: Any
) -> None:
    with pytest.raises(ValueError):
        shared_training_client.forward_backward(
            [sft(ts, TEXT_A)], "ppo"
        )  # no logprobs / advantages


def test_per_token_length_mismatch_raises_at_the_call(ts: Any, shared_training_client: Any) -> None:
    datum = ts.Datum(
        model_input=ts.ModelInput.from_ints(list(TEXT_A)),
        loss_fn_inputs={"target_tokens": list(TEXT_A[1:]), "weights": [1.0] * len(TEXT_A)},
    )
    with pytest.raises(ValueError):
        shared_training_client.forward_backward([datum], "cross_entropy")


def test_create_sampling_client_needs_exactly_one_source(
    backend: Backend, service_client: Any
) -> None:
    with pytest.raises(ValueError):
        service_client.create_sampling_client()
    with pytest.raises(ValueError):
        service_client.create_sampling_client(base_model=backend.base_model, model_package_arn="x")


def test_bad_prompt_type_raises_at_the_call(ts: Any, shared_training_client: Any) -> None:
    sampler = shared_training_client.create_sampling_client()
    with pytest.raises(TypeError):
        sampler.sample((1, 2, 3), 1, ts.SamplingParams())


def test_empty_batch_is_refused(backend: Backend, ts: Any, training_client: Any) -> None:
    with pytest.raises((ClientError, ts.OperationError)):
        result(training_client.forward_backward([], "cross_entropy"), backend)


@pytest.mark.parametrize("rank", [0, 300])
def test_lora_rank_out_of_range_is_refused(
    backend: Backend, new_training_client: Any, rank: int
) -> None:
    """CreateTrainingSession's LoRA rank range (docs/wire.md#10): a rank outside it is
    refused, as a ValidationException with a 4xx status when the server refuses it."""
    with pytest.raises((ClientError, ParamValidationError)) as info:
        new_training_client(rank=rank, alpha=8)
    if isinstance(info.value, ClientError):
        assert _code(info.value) == "ValidationException"


#: The longest description a save accepts (docs/wire.md#10).
DESCRIPTION_MAX = 1024


def test_a_description_over_1024_characters_is_refused(
    backend: Backend, training_client: Any
) -> None:
    """SaveWeights' description holds up to 1024 characters (docs/wire.md#10): one of 1024 is
    saved, one of 1025 refused as a ValidationException with a 4xx status (at the call or at
    ``result()``)."""
    saved = training_client.save_weights_for_sampler(description="d" * DESCRIPTION_MAX)
    assert result(saved, backend).model_package_arn
    with pytest.raises(ClientError) as info:
        result(
            training_client.save_weights_for_sampler(description="d" * (DESCRIPTION_MAX + 1)),
            backend,
        )
    assert _code(info.value) == "ValidationException"


def test_max_tokens_below_512_fails_at_result(
    backend: Backend, ts: Any, strict_training_client: Any
) -> None:
    sampler = strict_training_client.create_sampling_client()
    future = sampler.sample(
        ts.ModelInput.from_ints(list(backend.prompt)), 1, ts.SamplingParams(max_tokens=16)
    )  # constructed and submitted without error: the refusal comes at result()
    with pytest.raises(ParamValidationError):
        result(future, backend)


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", 0.05), ("weight_decay", 2.0), ("grad_clip_norm", 500.0)],
)
def test_adam_params_outside_the_service_range(
    backend: Backend, ts: Any, strict_training_client: Any, field: str, value: float
) -> None:
    step = strict_training_client.optim_step(adam(ts, backend, **{field: value}))
    with pytest.raises(ClientError) as info:
        result(step, backend)
    assert _code(info.value) == "ValidationException"


def test_temperature_above_two_is_refused(
    backend: Backend, ts: Any, strict_training_client: Any
) -> None:
    sampler = strict_training_client.create_sampling_client()
    params = ts.SamplingParams(max_tokens=512, temperature=3.0, stop=["a"])
    with pytest.raises(ClientError) as info:
        result(sampler.sample(ts.ModelInput.from_ints(list(backend.prompt)), 1, params), backend)
    assert _code(info.value) == "ValidationException"


@pytest.mark.requires("sequence.gap_recovery")
def test_refused_op_does_not_block_later_ops(
    backend: Backend, ts: Any, strict_training_client: Any
) -> None:
    """An op refused at submit consumed its sequence number; later ops still complete once
    the backend's gap timeout has passed."""
    refused = strict_training_client.optim_step(adam(ts, backend, learning_rate=0.05))
    later = strict_training_client.forward([sft(ts, TEXT_A)], "cross_entropy")
    with pytest.raises(ClientError):
        result(refused, backend)
    waited = later.result(timeout=backend.limits.gap_timeout_s + backend.limits.op_timeout_s)
    assert len(waited.loss_fn_outputs) == 1
    assert strict_training_client.current_sequence_number == 2
