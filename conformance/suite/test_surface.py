"""Surface: the public names, signatures, enums and exception tree (docs/wire.md#2,
#4-#8)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError

ALL = {
    "ServiceClient", "TrainingClient", "SamplingClient", "APIFuture", "RequestStatus",
    "DEFAULT_MODEL_PACKAGE_GROUP_NAME", "DEFAULT_SESSION_NAME_PREFIX", "AdamParams", "Datum",
    "EncodedTextChunk", "ForwardBackwardOutput", "LoadStateResponse", "LossFunction",
    "ModelInput", "ModelInputChunk", "ModelPackageDeletion", "ModelPackageInfo",
    "ModelPackageKind", "OptimStepResponse", "SampledSequence", "SampleResponse",
    "SamplingParams", "SaveStateResponse", "SaveWeightsResponse", "SessionStatus",
    "TrainingSessionSummary", "StopReason", "TensorData", "TensorDtype", "TokenLogprob",
    "VpcConfig", "ArtifactDeletionError", "OperationError", "ResultMismatchError",
    "TrainingSessionError", "is_retryable",
}  # fmt: skip


def _params(fn: Any) -> list[tuple[str, str]]:
    return [
        (p.name, p.kind.name) for p in inspect.signature(fn).parameters.values() if p.name != "self"
    ]


def test_all_has_exactly_the_36_names(ts: Any) -> None:
    assert set(ts.__all__) == ALL and len(ts.__all__) == 36
    for name in ALL:
        assert hasattr(ts, name), name


def test_constants(ts: Any) -> None:
    assert ts.DEFAULT_MODEL_PACKAGE_GROUP_NAME == "sagemaker-default"
    assert ts.DEFAULT_SESSION_NAME_PREFIX == "sagemaker-training-session"


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        ("LossFunction", {"cross_entropy", "importance_sampling", "ppo", "cispo"}),
        ("RequestStatus", {"Pending", "InProgress", "Completed", "Failed", "Skipped"}),
        ("StopReason", {"stop", "length"}),
        ("ModelPackageKind", {"checkpoint", "model"}),
    ],
)
def test_enum_values(ts: Any, enum: str, values: set[str]) -> None:
    assert {member.value for member in getattr(ts, enum)} == values


def test_exception_tree(ts: Any) -> None:
    for name in ("OperationError", "ResultMismatchError", "ArtifactDeletionError"):
        assert issubclass(getattr(ts, name), ts.TrainingSessionError), name
    assert issubclass(ts.TrainingSessionError, Exception)
    err = ts.OperationError("training", "boom", operation_id="op-1")
    assert (err.operation_type, err.operation_id, err.message) == ("training", "op-1", "boom")


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ExecuteTrainingOperation",
    )


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        ("ThrottlingException", 429, True),
        ("InternalServerException", 500, True),
        ("ServiceUnavailable", 503, True),
        ("ValidationException", 400, False),
        ("ConflictException", 409, False),
    ],
)
def test_is_retryable(ts: Any, code: str, status: int, retryable: bool) -> None:
    assert ts.is_retryable(_client_error(code, status)) is retryable


def test_is_retryable_refuses_non_service_errors(ts: Any) -> None:
    assert ts.is_retryable(ParamValidationError(report="x")) is False
    assert ts.is_retryable(ts.OperationError("training", "x")) is False
    assert ts.is_retryable(TimeoutError()) is False


def test_service_client_signatures(ts: Any) -> None:
    sc = ts.ServiceClient
    init = dict(_params(sc.__init__))
    assert init["role_arn"] == "KEYWORD_ONLY" and init["region"] == "POSITIONAL_OR_KEYWORD"
    create = _params(sc.create_lora_training_client)
    assert create[0] == ("base_model", "POSITIONAL_OR_KEYWORD")
    assert {n for n, k in create[1:]} >= {"rank", "alpha", "seed", "user_metadata"}
    assert all(k == "KEYWORD_ONLY" for _, k in create[1:])
    for method in (
        "list_base_models", "list_model_packages", "get_latest_model_package",
        "create_training_client_from_state", "create_training_client_from_state_with_optimizer",
        "create_sampling_client", "list_sessions", "stop_session", "delete_session",
        "delete_model_package",
    ):  # fmt: skip
        assert callable(getattr(sc, method)), method
        assert inspect.iscoroutinefunction(getattr(sc, method + "_async", None)) or method in {
            "list_base_models", "list_model_packages", "get_latest_model_package",
            "list_sessions", "stop_session", "delete_session", "delete_model_package",
        }  # fmt: skip


def test_training_client_signatures(ts: Any) -> None:
    tc = ts.TrainingClient
    assert _params(tc.forward_backward) == [
        ("batch", "POSITIONAL_OR_KEYWORD"),
        ("loss_fn", "POSITIONAL_OR_KEYWORD"),
        ("loss_fn_inputs", "POSITIONAL_OR_KEYWORD"),
        ("loss_fn_config", "POSITIONAL_OR_KEYWORD"),
    ]
    assert _params(tc.optim_step) == [("adam_params", "POSITIONAL_OR_KEYWORD")]
    assert _params(tc.load_state) == [("model_package_arn", "POSITIONAL_OR_KEYWORD")]
    for name in (
        "forward", "forward_backward", "optim_step", "save_state", "save_weights_for_sampler",
        "load_state", "load_state_with_optimizer",
    ):  # fmt: skip
        assert inspect.iscoroutinefunction(getattr(tc, name + "_async")), name
    assert isinstance(inspect.getattr_static(tc, "current_sequence_number"), property)
    for name in (
        "stop",
        "delete",
        "__enter__",
        "__exit__",
        "save_weights_and_get_sampling_client",
        "create_sampling_client",
        "get_tokenizer",
        "list_model_packages",
        "get_latest_model_package",
    ):
        assert callable(getattr(tc, name)), name


def test_sampling_client_signatures(ts: Any) -> None:
    sc = ts.SamplingClient
    assert _params(sc.sample) == [
        ("prompt", "POSITIONAL_OR_KEYWORD"),
        ("num_samples", "POSITIONAL_OR_KEYWORD"),
        ("sampling_params", "POSITIONAL_OR_KEYWORD"),
        ("include_prompt_logprobs", "KEYWORD_ONLY"),
        ("topk_prompt_logprobs", "KEYWORD_ONLY"),
    ]
    assert inspect.iscoroutinefunction(sc.sample_async)
    assert inspect.iscoroutinefunction(sc.compute_logprobs_async)


def test_future_surface(ts: Any) -> None:
    for name in ("result", "done", "exception", "cancel", "cancelled", "__await__"):
        assert callable(getattr(ts.APIFuture, name)), name
    assert inspect.iscoroutinefunction(ts.APIFuture.result_async)
    assert isinstance(inspect.getattr_static(ts.APIFuture, "operation_id"), property)


def test_types_coerce_and_validate(ts: Any) -> None:
    assert ts.ModelInput.from_ints([1, 2, 3]).to_ints() == [1, 2, 3]
    assert ts.SamplingParams(stop="x").stop == ["x"]
    with pytest.raises(ValueError):
        ts.SamplingParams(max_token=10)  # extra fields are forbidden (a pydantic ValueError)
    with pytest.raises(ValueError):
        ts.SamplingParams(stop=[1, 2])
    adam = ts.AdamParams.from_any({"learning_rate": 1e-4, "beta1": None})
    assert adam.learning_rate == 1e-4 and adam.beta1 == ts.AdamParams().beta1
