"""The wire contract, spoken by plain boto3 clients: error codes and statuses, the MUST
behaviours of docs/wire.md#4, sequence gaps, long-poll, Hub and admin routes."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from localsession import AdamParams, Datum, ModelInput
from localsession import ServiceClient as LocalServiceClient

from .common import GROUP, REGION, ROLE, S3, Running

HUB_ARN = (
    f"arn:aws:sagemaker:{REGION}:aws:hub-content/SageMakerPublicHub/Model/localsession-tiny/1.0.0"
)
FB = {
    "forwardBackward": {
        "lossFnName": "cross_entropy",
        "datumList": [
            {
                "modelInput": {"chunks": [{"tokens": [257, 1, 2, 3], "type": "encoded_text"}]},
                "lossFnInputs": {
                    "target_tokens": {"data": [1, 2, 3, 258], "dtype": "int64", "shape": [4]},
                    "weights": {"data": [1.0] * 4, "dtype": "float32", "shape": [4]},
                },
            }
        ],
    }
}


@pytest.fixture
def clients(server: Running, sdk_env: Callable[[Running], None]) -> tuple[Any, Any]:
    sdk_env(server)
    return boto3.client("sagemaker"), boto3.client("sagemakertrainingsessionruntime")


def _create(cp: Any, name: str | None = None) -> str:
    name = name or f"wire-{uuid.uuid4().hex[:8]}"
    cp.create_training_session(
        TrainingSessionName=name,
        ModelPackageGroupArn=GROUP,
        LoraConfig={"Rank": 4, "Alpha": 8},
        RoleArn=ROLE,
        ModelConfig={"BaseModelArn": HUB_ARN},
        OutputConfig={"S3Location": {"Path": S3}},
    )
    return name


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response: Any = exc.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def _submit(rt: Any, name: str, seq: int, config: dict[str, Any], token: str | None = None) -> str:
    response = rt.execute_training_operation(
        trainingSessionName=name,
        sequenceNumber=seq,
        clientToken=token or str(uuid.uuid4()),
        operationConfig=config,
    )
    return str(response["operationId"])


def test_session_lifecycle_and_stop_idempotency_message(clients: tuple[Any, Any]) -> None:
    cp, _ = clients
    name = _create(cp)
    detail = cp.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running"  # the Describe waited for the model
    assert detail["TrainingSessionArn"].endswith(f":training-session/{name}")
    with pytest.raises(ClientError) as dup:
        _create(cp, name)
    assert _code(dup) == ("ResourceInUse", 400)
    listed = cp.list_training_sessions(NameContains=name)["TrainingSessionSummaries"]
    assert [s["TrainingSessionArn"] for s in listed] == [detail["TrainingSessionArn"]]
    cp.stop_training_session(TrainingSessionName=name)
    with pytest.raises(ClientError) as again:
        cp.stop_training_session(TrainingSessionName=name)
    assert _code(again) == ("ValidationException", 400)
    assert "invalid session state transition from Stopped to Stopping" in str(again.value)
    cp.delete_training_session(TrainingSessionName=name)
    with pytest.raises(ClientError) as gone:
        cp.describe_training_session(TrainingSessionName=name)
    assert _code(gone) == ("ResourceNotFound", 400)


def test_runtime_ops_results_and_duplicates(clients: tuple[Any, Any]) -> None:
    cp, rt = clients
    name = _create(cp)
    cp.describe_training_session(TrainingSessionName=name)
    token = str(uuid.uuid4())
    first = _submit(rt, name, 1, FB, token)
    assert _submit(rt, name, 1, FB, token) == first  # same (token, seq): the original id
    opt = {"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-3}}}
    second = _submit(rt, name, 2, opt)
    started = time.monotonic()
    result = rt.get_training_operation_result(trainingSessionName=name, operationId=second)
    assert time.monotonic() - started < 5.0  # long-poll answered on completion
    assert result["status"] == "Completed"
    assert list(result["operationResult"]) == ["optimizerStep"]  # exactly one member
    fb = rt.get_training_operation_result(trainingSessionName=name, operationId=first)
    assert set(fb["operationResult"]["forwardBackward"]["metrics"]) >= {"loss", "global_token_num"}
    cp.stop_training_session(TrainingSessionName=name)
    # Results stay readable after stop; new runtime calls are refused with 409.
    after = rt.get_training_operation_result(trainingSessionName=name, operationId=first)
    assert after["status"] == "Completed"
    with pytest.raises(ClientError) as stopped:
        _submit(rt, name, 3, opt)
    assert _code(stopped) == ("ConflictException", 409)
    with pytest.raises(ClientError) as unknown:
        rt.get_training_operation_result(trainingSessionName=name, operationId="nope")
    assert _code(unknown) == ("ResourceNotFoundException", 404)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"optimizerStep": {"adamParamsConfig": {"learningRate": 0.05}}}, "learningRate"),
        ({"optimizerStep": {"adamParamsConfig": {"learningRate": 1e-3, "beta1": 1.0}}}, "beta1"),
        (
            {
                "forwardBackward": {
                    **FB["forwardBackward"],
                    "lossFnConfig": {"clip_low_threshold": 2.0},
                }
            },
            "clip_low_threshold",
        ),
    ],
)
def test_server_side_range_checks(
    clients: tuple[Any, Any], config: dict[str, Any], field: str
) -> None:
    """botocore checks only minimums; the server enforces every maximum (docs/wire.md#5, #10)."""
    cp, rt = clients
    name = _create(cp)
    cp.describe_training_session(TrainingSessionName=name)
    with pytest.raises(ClientError) as refused:
        _submit(rt, name, 1, config)
    assert _code(refused) == ("ValidationException", 400)
    assert field in str(refused.value)
    cp.stop_training_session(TrainingSessionName=name)


def test_sampling_limits_checked_on_the_server(clients: tuple[Any, Any]) -> None:
    cp, rt = clients
    name = _create(cp)
    cp.describe_training_session(TrainingSessionName=name)
    prompt = {"chunks": [{"tokens": [257, 1], "type": "encoded_text"}]}
    with pytest.raises(ClientError) as refused:
        rt.execute_sampling_operation(
            trainingSessionName=name,
            operationConfig={
                "sample": {
                    "prompt": prompt,
                    "numSamples": 1001,
                    "samplingParams": {"maxTokens": 512},
                }
            },
        )
    assert _code(refused) == ("ValidationException", 400)
    assert "numSamples" in str(refused.value)
    cp.stop_training_session(TrainingSessionName=name)


def test_sequence_gap_blocks_then_recovers(clients: tuple[Any, Any]) -> None:
    cp, rt = clients
    name = _create(cp)
    cp.describe_training_session(TrainingSessionName=name)
    later = _submit(rt, name, 2, FB)  # number 1 never arrives
    # the session's worker marks it Blocked when it wakes and finds the gap, and keeps it so
    # for the server's 1 s gap timeout: look until it does (not once, right after the submit)
    seen = []
    while "Blocked" not in seen and len(seen) < 3000:
        detail = cp.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"]
        seen.append(detail["TrainingSessionStatus"])
    assert seen[-1] == "Blocked", sorted(set(seen))
    assert detail["LastReceivedSequenceNumber"] == 2
    result = rt.get_training_operation_result(trainingSessionName=name, operationId=later)
    assert result["status"] == "Completed"  # after the 1 s gap timeout of this server
    detail = cp.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"]
    assert detail["TrainingSessionStatus"] == "Running"
    cp.stop_training_session(TrainingSessionName=name)


def test_errors_match_in_process_and_sdk(server: Running, sdk: Any) -> None:
    """A bad learning rate fails the same way through the SDK over HTTP and in-process."""
    import sagemaker.train.training_session as ts

    local = LocalServiceClient(role_arn=ROLE, backend=server.service, model_package_group_arn=GROUP)
    batch = [
        Datum(
            model_input=ModelInput.from_ints([257, 1, 2]),
            loss_fn_inputs={"target_tokens": [1, 2, 258], "weights": [1.0, 1.0, 1.0]},
        )
    ]
    failures = []
    for client, adam in ((sdk, ts.AdamParams), (local, AdamParams)):
        with client.create_lora_training_client(base_model="localsession-tiny", rank=4) as tc:
            tc.forward_backward(batch, "cross_entropy").result()
            with pytest.raises(Exception) as caught:
                tc.optim_step(adam(learning_rate=0.05)).result()
            failures.append(caught.value)
    over_http, in_process = failures
    assert isinstance(over_http, ClientError) and isinstance(in_process, ClientError)
    assert type(over_http).__name__ == type(in_process).__name__ == "ValidationException"
    assert over_http.response["Error"]["Code"] == in_process.response["Error"]["Code"]
    assert over_http.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ClientError) as unknown:
        sdk.stop_session("no-such-session")
    assert unknown.value.response["Error"]["Code"] == "ResourceNotFound"


def test_hub_lists_and_describes_base_models(clients: tuple[Any, Any], server: Running) -> None:
    cp, _ = clients
    names = [
        s["HubContentName"]
        for s in cp.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")[
            "HubContentSummaries"
        ]
    ]
    assert {"localsession-tiny", "localsession-small"} <= set(names)
    described = cp.describe_hub_content(
        HubName="SageMakerPublicHub", HubContentType="Model", HubContentName="localsession-tiny"
    )
    assert described["HubContentArn"] == HUB_ARN
    from transformers import AutoTokenizer

    # The document names the id users type; its tokenizer is exported into localsession's
    # own HF cache under the server's home (the `serve` exports point HF_HUB_CACHE there).
    hf_id = json.loads(described["HubContentDocument"])["HuggingfaceId"]
    assert hf_id == "localsession/tiny"
    cache = server.service.config.home / "hf-hub"
    tokenizer = AutoTokenizer.from_pretrained(hf_id, cache_dir=str(cache))
    assert tokenizer.encode("hi") == [257, 104, 105]
    with pytest.raises(ClientError) as missing:
        cp.describe_hub_content(
            HubName="SageMakerPublicHub", HubContentType="Model", HubContentName="nope"
        )
    assert _code(missing) == ("ResourceNotFound", 400)


def test_model_package_group_create_and_describe(clients: tuple[Any, Any]) -> None:
    cp, _ = clients
    group = f"grp-{uuid.uuid4().hex[:6]}"
    arn = cp.create_model_package_group(ModelPackageGroupName=group)["ModelPackageGroupArn"]
    assert arn.endswith(f":model-package-group/{group}")
    with pytest.raises(ClientError) as again:
        cp.create_model_package_group(ModelPackageGroupName=group)
    assert _code(again) == ("ResourceInUse", 400)
    assert (
        cp.describe_model_package_group(ModelPackageGroupName=group)["ModelPackageGroupArn"] == arn
    )


def test_malformed_bodies_and_unknown_targets(server: Running) -> None:
    def post(path: str, data: bytes, headers: dict[str, str]) -> tuple[int, Any, Any]:
        request = urllib.request.Request(server.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, response.headers, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.headers, json.loads(error.read())

    status, _, body = post("/", b"{not json", {"X-Amz-Target": "SageMaker.DescribeTrainingSession"})
    assert status == 400 and body["__type"] == "ValidationException" and "JSON" in body["message"]
    status, _, body = post("/", b"{}", {"X-Amz-Target": "SageMaker.CreateEndpoint"})
    assert status == 400 and body["__type"] == "UnknownOperationException"
    status, headers, body = post("/v1/training-sessions/nope/operations", b"{}", {})
    assert status == 404 and headers.get("x-amzn-ErrorType") == "ResourceNotFoundException"


def test_admin_health_and_reset(server: Running, clients: tuple[Any, Any]) -> None:
    cp, _ = clients
    name = _create(cp)
    with urllib.request.urlopen(server.url + "/_localsession/health") as response:
        assert json.loads(response.read())["status"] == "ok"
    request = urllib.request.Request(server.url + "/_localsession/reset", data=b"", method="POST")
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read())["sessionsRemoved"] >= 1
    with pytest.raises(ClientError):
        cp.describe_training_session(TrainingSessionName=name)
