"""Wire details of issue 16: ARNs in the caller's region (item 5); malformed session names
answer ValidationException (item 9); under ``--auth`` only the health probe is open and S3
is signed too; no route blocks the event loop while the runtime works (item 9)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from localsession import ServiceClient as LocalServiceClient
from localsession.runtime.service import Service, ServiceConfig
from localsession.server.auth import Credential
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import build_service

from .common import GROUP, ROLE, S3, Running

MODEL = "localsession-tiny"
KEY, SECRET = "AKIDWIRE", "wire-secret-0123456789"


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response: Any = exc.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def test_arns_name_the_sdk_clients_region(sdk: Any, server: Running) -> None:
    import sagemaker.train.training_session as ts

    region = "eu-central-1"
    group = GROUP.replace("us-west-2", region)
    client = ts.ServiceClient(
        region=region, role_arn=ROLE, model_package_group_arn=group, s3_output_path=S3
    )
    with client.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        arn = tc.save_state().result().model_package_arn
        name = tc.training_session_name
    assert arn.startswith(f"arn:aws:sagemaker:{region}:"), arn
    detail = server.service.describe_training_session({"TrainingSessionName": name})
    assert detail["TrainingSessionDetail"]["TrainingSessionArn"].startswith(
        f"arn:aws:sagemaker:{region}:"
    )
    cp = boto3.client("sagemaker", region_name="ap-south-1")
    made = cp.create_model_package_group(ModelPackageGroupName="regional-group")
    assert made["ModelPackageGroupArn"].startswith("arn:aws:sagemaker:ap-south-1:")
    # the default client (us-west-2) still gets us-west-2
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        assert tc.save_state().result().model_package_arn.startswith("arn:aws:sagemaker:us-west-2:")


def test_arns_name_the_in_process_clients_region(tmp_path: Path) -> None:
    service = build_service(ServiceConfig(home=tmp_path, max_sessions=2))
    try:
        client = LocalServiceClient("sa-east-1", role_arn=ROLE, backend=service)
        with client.create_lora_training_client("localsession/tiny", rank=4) as tc:
            arn = tc.save_weights_for_sampler().result().model_package_arn
            name = tc.training_session_name
        assert arn.startswith("arn:aws:sagemaker:sa-east-1:000000000000:model-package/")
        detail = service.describe_training_session({"TrainingSessionName": name})
        assert detail["TrainingSessionDetail"]["TrainingSessionArn"].startswith(
            "arn:aws:sagemaker:sa-east-1:"
        )
        assert ":sa-east-1:" in detail["TrainingSessionDetail"]["ModelPackageGroupArn"]
        # and its package is still found, listed and sampled from any client
        assert (
            client.list_model_packages(model_package_group_arn="sagemaker-default", max_results=5)[
                0
            ].model_package_arn
            == arn
        )
    finally:
        service.close()


@pytest.mark.parametrize("name", ["bad_name", "-lead", "trail-", "x" * 64, "a b", "é"])
def test_malformed_session_names_are_validation_errors(
    server: Running, sdk_env: Callable[[Running], None], name: str
) -> None:
    sdk_env(server)
    cp = boto3.client("sagemaker")
    for call in (
        cp.describe_training_session,
        cp.stop_training_session,
        cp.delete_training_session,
    ):
        with pytest.raises(ClientError) as err:
            call(TrainingSessionName=name)
        assert _code(err) == ("ValidationException", 400), (call, name)
        assert "TrainingSessionName" in str(err.value)
    with pytest.raises(ClientError) as unknown:  # well-formed but absent: still not found
        cp.describe_training_session(TrainingSessionName="no-such-session")
    assert _code(unknown) == ("ResourceNotFound", 400)
    local = LocalServiceClient(role_arn=ROLE, backend=server.service)
    with pytest.raises(ClientError) as in_process:
        local.stop_session(name)
    assert _code(in_process) == ("ValidationException", 400)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Service]]:
    service = build_service(ServiceConfig(home=tmp_path_factory.mktemp("secured"), max_sessions=2))
    with ServerThread(service, long_poll=2.0, credential=Credential(KEY, SECRET)) as url:
        yield url, service
    service.close()


def test_under_auth_health_is_open_and_says_nothing(
    secured: tuple[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = secured
    with urllib.request.urlopen(url + "/_localsession/health") as response:
        assert json.loads(response.read()) == {"status": "ok"}
    for key, value in client_env(url, "us-west-2").items():
        monkeypatch.setenv(key, value)
    signed = boto3.Session(aws_access_key_id=KEY, aws_secret_access_key=SECRET)
    s3 = signed.client("s3")
    assert s3.list_objects_v2(Bucket="bucket", Prefix="out/")["KeyCount"] == 0
    s3.delete_objects(Bucket="bucket", Delete={"Objects": [{"Key": "k"}], "Quiet": True})
    wrong = boto3.Session(aws_access_key_id=KEY, aws_secret_access_key="wrong").client("s3")
    with pytest.raises(ClientError) as refused:
        wrong.list_objects_v2(Bucket="bucket")
    assert _code(refused) == ("SignatureDoesNotMatch", 403)  # S3's code, in S3's XML
    unknown = boto3.Session(aws_access_key_id="AKIDOTHER", aws_secret_access_key=SECRET)
    with pytest.raises(ClientError) as other:
        unknown.client("s3").get_object(Bucket="bucket", Key="k")
    assert _code(other) == ("InvalidAccessKeyId", 403)
    request = urllib.request.Request(url + "/_localsession/reset", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as reset:
        urllib.request.urlopen(request)
    assert reset.value.code == 403


def test_slow_runtime_calls_never_block_the_event_loop(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reset that joins workers, or a result lookup that writes a record, takes its time
    on a worker thread: the health probe answers meanwhile."""
    service = server.service

    def slow_reset(*args: Any, **kwargs: Any) -> int:
        time.sleep(1.5)
        return 0

    def slow_done(*args: Any, **kwargs: Any) -> None:
        time.sleep(1.5)
        raise service_error

    from localsession.runtime import errors

    service_error = errors.not_found("no such op", runtime=True)
    monkeypatch.setattr(service, "reset", slow_reset)
    monkeypatch.setattr(service, "on_operation_done", slow_done)
    calls = [
        urllib.request.Request(server.url + "/_localsession/reset", data=b"", method="POST"),
        urllib.request.Request(server.url + "/v1/training-sessions/x/operations/y"),
    ]
    for call in calls:
        worker = threading.Thread(target=_swallow, args=(call,))
        worker.start()
        time.sleep(0.3)  # the slow call is in progress
        started = time.perf_counter()
        with urllib.request.urlopen(server.url + "/_localsession/health", timeout=5) as response:
            assert response.status == 200
        assert time.perf_counter() - started < 1.0
        worker.join()


def _swallow(request: urllib.request.Request) -> None:
    try:
        urllib.request.urlopen(request, timeout=10).read()
    except urllib.error.HTTPError:
        pass


def test_over_long_sequences_fail_the_op_naming_limit_and_length(
    sdk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 8 through the unmodified SDK: the op fails; the session keeps working. The limit
    is a model map entry's ``max_context`` (the built-in's own 131,072 is too long to fill)."""
    import sagemaker.train.training_session as ts

    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "short/tiny=localsession/tiny;max_context=2048")
    long_prompt = [257] + [97] * 1999  # 2000 tokens: with max_tokens=512, 2512 > 2048
    datum = ts.Datum(
        model_input=ts.ModelInput.from_ints([97] * 2049),
        loss_fn_inputs={"target_tokens": [97] * 2049, "weights": [1.0] * 2049},
    )
    with sdk.create_lora_training_client(base_model="short/tiny", rank=4, alpha=8) as tc:
        sampler = tc.create_sampling_client()
        with pytest.raises(Exception, match=r"2512.*2048") as sampled:
            sampler.sample(long_prompt, sampling_params=ts.SamplingParams(max_tokens=512)).result()
        assert "max_tokens=512" in str(sampled.value)
        with pytest.raises(Exception, match=r"datum 0: .*2049 tokens.*2048"):
            tc.forward_backward([datum], "cross_entropy").result()
        with pytest.raises(Exception, match=r"2049 tokens.*2048"):
            sampler.compute_logprobs([97] * 2049).result()
        ok = ts.Datum(
            model_input=ts.ModelInput.from_ints([97] * 16),
            loss_fn_inputs={"target_tokens": [97] * 16, "weights": [1.0] * 16},
        )
        assert tc.forward_backward([ok], "cross_entropy").result().metrics["loss"] > 0


def test_a_built_in_stand_in_takes_a_third_party_max_tokens(sdk: Any) -> None:
    """A trainer written for the service samples with ``max_tokens=4096`` (agentcore-rl-toolkit's
    default): a built-in accepts it, as the 128k models it stands in for do."""
    import sagemaker.train.training_session as ts

    stops = [chr(c) for c in range(33, 127)] + [" ", "\n"]  # ends at the first printable byte
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        sampler = tc.create_sampling_client()
        params = ts.SamplingParams(max_tokens=4096, temperature=1.0, seed=0, stop=stops)
        out = sampler.sample([257] + [97] * 100, sampling_params=params).result(timeout=120)
        assert 1 <= len(out.sequences[0].tokens) <= 4096
