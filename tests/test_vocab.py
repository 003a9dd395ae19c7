"""``localsession.vocab`` against botocore's model of the service and the real SDK.

Each table is compared with an independent source: the enums, unions, ranges and error shapes
of botocore's ``sagemakertrainingsessionruntime`` and ``sagemaker`` models, and the installed
``sagemaker.train.training_session`` (its method names, defaults and retry policy).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import botocore.session
import pytest

from localsession import vocab
from localsession.runtime import members, validate


@pytest.fixture(scope="module")
def runtime() -> Any:
    return botocore.session.get_session().get_service_model("sagemakertrainingsessionruntime")


@pytest.fixture(scope="module")
def control() -> Any:
    return botocore.session.get_session().get_service_model("sagemaker")


def test_vocab_imports_nothing_heavy() -> None:
    code = (
        "import sys, localsession.vocab\n"
        "print(sorted(m for m in ('torch', 'botocore', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    assert "torch" not in out.stdout


def test_statuses(runtime: Any, control: Any) -> None:
    assert set(vocab.SESSION_STATUSES) == set(control.shape_for("TrainingSessionStatus").enum)
    assert vocab.OP_STATUSES == tuple(runtime.shape_for("RequestStatus").enum)
    assert set(vocab.PackageStatus) <= set(control.shape_for("ModelPackageStatus").enum)
    assert set(vocab.PackageStatus) <= set(control.shape_for("ModelPackageGroupStatus").enum)
    assert vocab.OP_TERMINAL == {"Completed", "Failed", "Skipped"}


def test_op_kinds_are_the_config_unions(runtime: Any) -> None:
    training = runtime.operation_model("ExecuteTrainingOperation").input_shape
    sampling = runtime.operation_model("ExecuteSamplingOperation").input_shape
    assert vocab.TRAINING_OPS == tuple(training.members["operationConfig"].members)
    assert vocab.SAMPLING_OPS == tuple(sampling.members["operationConfig"].members)


def test_sdk_methods_exist_on_the_real_clients() -> None:
    from sagemaker.train.training_session import SamplingClient, TrainingClient

    for kind, method in vocab.METHOD_OF_KIND.items():
        # loadWeightsForSampling is sent by the TrainingClient's private helper of that name
        names = (method, f"_{method}")
        found = [c for c in (TrainingClient, SamplingClient) for n in names if hasattr(c, n)]
        assert found, (kind, method)
        assert vocab.KIND_OF_METHOD[method] == kind


def test_losses(runtime: Any) -> None:
    assert vocab.LOSS_FUNCTIONS == tuple(runtime.shape_for("LossFnName").enum)
    assert set(vocab.RL_LOSSES) < set(vocab.LOSS_FUNCTIONS)
    assert set(vocab.REQUIRED_INPUT_KEYS) == set(vocab.LOSS_FUNCTIONS)
    for keys in vocab.REQUIRED_INPUT_KEYS.values():
        assert set(keys) <= set(vocab.LOSS_INPUT_KEYS)
    for loss, (low, high) in vocab.DEFAULT_CLIP.items():
        lo_range, hi_range = (vocab.LOSS_CONFIG_RANGES[k] for k in vocab.LOSS_CONFIG_KEYS)
        assert lo_range[0] <= low <= lo_range[1] and hi_range[0] <= high <= hi_range[1], loss


def test_adam_keys_ranges_and_defaults(runtime: Any) -> None:
    shape = runtime.shape_for("AdamParamsConfig")
    assert tuple(shape.members) == tuple(vocab.ADAM_WIRE_KEYS)
    assert tuple(shape.required_members) == vocab.ADAM_REQUIRED
    for key, member in shape.members.items():
        assert vocab.ADAM_RANGES[key] == (member.metadata["min"], member.metadata["max"]), key
    from sagemaker.train.training_session import AdamParams

    sdk = AdamParams()
    for wire, field in vocab.ADAM_WIRE_KEYS.items():
        if wire in vocab.ADAM_DEFAULTS:
            assert getattr(sdk, field) == vocab.ADAM_DEFAULTS[wire], wire


def test_error_codes_and_statuses(runtime: Any, control: Any) -> None:
    modelled = {
        name: runtime.shape_for(name).metadata["error"]["httpStatusCode"]
        for name in runtime.shape_names
        if runtime.shape_for(name).metadata.get("exception")
    }
    assert modelled == vocab.RUNTIME_ERRORS
    control_errors = {
        name for name in control.shape_names if control.shape_for(name).metadata.get("exception")
    }
    assert set(vocab.CONTROL_PLANE_ERRORS) - {"ValidationException"} <= control_errors


def test_retry_policy_and_default_group_match_the_sdk() -> None:
    from sagemaker.train.training_session import exceptions, service_client

    for code in ("ThrottlingException", "InternalServerException", "ValidationException"):
        for status in (400, 429, 500, 503):
            error = botocore.exceptions.ClientError(
                {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
            )
            assert vocab.is_retryable(code, status) == exceptions.is_retryable(error)
    assert vocab.DEFAULT_GROUP == service_client.DEFAULT_MODEL_PACKAGE_GROUP_NAME


def test_members_are_botocores(runtime: Any, control: Any) -> None:
    training = runtime.operation_model("ExecuteTrainingOperation").input_shape
    assert validate.MEMBERS["ExecuteTrainingOperation"] == {
        "sequenceNumber",
        "clientToken",
        "operationConfig",
    }
    assert validate.MEMBERS["forwardBackward"] == set(
        training.members["operationConfig"].members["forwardBackward"].members
    )
    assert validate.MEMBERS["TensorData"] == {"data", "dtype", "shape"}
    create = control.operation_model("CreateTrainingSession").input_shape
    assert validate.MEMBERS["CreateTrainingSession"] == set(create.members)
    assert set(members.MEMBERS) >= {"Datum", "ModelInput", "EncodedTextChunk", "sample"}


def test_words_read_as_their_values() -> None:
    """An enum word is its string everywhere a message or a body shows it."""
    import json

    word = vocab.SessionStatus.DELETION_FAILED
    assert word == "DeletionFailed" and hash(word) == hash("DeletionFailed")
    assert (str(word), f"{word}", f"{word:>15}", repr(word)) == (
        "DeletionFailed",
        "DeletionFailed",
        " DeletionFailed",
        "'DeletionFailed'",
    )
    assert json.dumps({"s": word, word: 1}) == '{"s": "DeletionFailed", "DeletionFailed": 1}'
    assert vocab.ErrorCode("ThrottlingException") is vocab.ErrorCode.THROTTLING


def test_tinker_defaults_are_the_tinker_sdks() -> None:
    """The Tinker dialect's words and defaults against the ``tinker`` SDK's own."""
    import inspect
    import typing

    from tinker import types
    from tinker.lib.public_interfaces.rest_client import RestClient
    from tinker.lib.public_interfaces.service_client import ServiceClient

    assert vocab.TINKER_LOSSES == typing.get_args(types.LossFnType)
    assert set(vocab.TINKER_RUN_LOSSES) == {
        *vocab.LOSS_FUNCTIONS,
        "dro",
        "gspo",
        "stable_reinforce",
    }
    adam = types.AdamParams()
    given = {key: getattr(adam, key) for key in vocab.TINKER_ADAM_DEFAULTS}
    assert vocab.TINKER_ADAM_DEFAULTS == given
    assert set(vocab.TINKER_ADAM_DEFAULTS) == set(types.AdamParams.model_fields) - {"type"}
    sampling = types.SamplingParams()
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (
        vocab.TINKER_TEMPERATURE,
        vocab.TINKER_TOP_P,
        vocab.TINKER_TOP_K,
    )
    rank = inspect.signature(ServiceClient.create_lora_training_client).parameters["rank"]
    assert rank.default == vocab.TINKER_LORA_RANK
    limit = inspect.signature(RestClient.list_training_runs).parameters["limit"]
    assert limit.default == vocab.TINKER_PAGE_LIMIT
