"""The launch post's GRPO loop through the unmodified SDK inside ``localsession.mock()``:
no sockets, and bit-identical to the same loop against ``localsession serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mock_blog as blog
import pytest
from mock_support import no_sockets

import localsession

MAP = {"openai/gpt-oss-20b": "localsession/tiny"}
BY_ID = "openai/gpt-oss-20b"  # the blog names its model by id, as the Hub lists it


def test_blog_grpo_in_the_mock_equals_serve(serve_env: Any) -> None:
    """Bit for bit. Each prompt's samples are awaited before the next is sent, so both runs
    batch the same requests (see the next test for why that matters)."""
    with no_sockets(), localsession.mock(model_map=MAP):
        in_mock = blog.grpo(BY_ID, concurrent=False)
    over_http = serve_env(lambda: blog.grpo(BY_ID, concurrent=False), MAP)
    assert len(in_mock["tokens"]) == 2 * len(blog.QUESTIONS) * 4
    assert all(m["loss"] == m["loss"] for m in in_mock["metrics"])  # finite, not NaN
    assert _untimed(in_mock) == _untimed(over_http)


def _untimed(run: dict[str, Any]) -> dict[str, Any]:
    """A run's results without ``mfu``, the one metric that depends on the wall clock."""
    return {**run, "metrics": [{k: v for k, v in m.items() if k != "mfu"} for m in run["metrics"]]}


def test_blog_grpo_all_in_flight_matches_serve(serve_env: Any) -> None:
    """The blog's shape, every sample request in flight at once. The runtime batches
    requests that arrive within milliseconds of each other, and a batch's logprobs can differ
    in the last float bit with its composition (so two runs of the same carrier can too):
    tokens are exact, floats agree to 1e-5."""
    with no_sockets(), localsession.mock(model_map=MAP):
        in_mock = blog.grpo(BY_ID)
    over_http = serve_env(lambda: blog.grpo(BY_ID), MAP)
    assert in_mock["tokens"] == over_http["tokens"] and in_mock["arn"] == over_http["arn"]
    for mine, theirs in zip(in_mock["logprobs"], over_http["logprobs"], strict=True):
        assert mine == pytest.approx(theirs, abs=1e-5)
    for mine, theirs in zip(in_mock["metrics"], over_http["metrics"], strict=True):
        assert mine.keys() == theirs.keys()
        mine, theirs = (_untimed({"metrics": [m]})["metrics"][0] for m in (mine, theirs))
        assert list(mine.values()) == pytest.approx(list(theirs.values()), rel=1e-4, abs=1e-5)


def test_blog_loop_with_every_socket_refused(socket_guard: None) -> None:
    """Only the real SDK is imported by the loop; connect() fails for the whole test."""
    with localsession.mock(model_map=MAP) as m:
        seen = blog.grpo(BY_ID, steps=1, group=2)
        assert m.service.list_training_sessions({})["TrainingSessionSummaries"]
    assert seen["tokens"] and seen["metrics"][0]["loss"] == seen["metrics"][0]["loss"]


def test_plain_boto3_clients_in_the_mock(socket_guard: None) -> None:
    import boto3

    with localsession.mock() as m:
        sm = boto3.client("sagemaker")
        runtime = boto3.client("sagemakertrainingsessionruntime")
        names = [
            c["HubContentName"]
            for c in sm.list_hub_contents(HubName="SageMakerPublicHub", HubContentType="Model")[
                "HubContentSummaries"
            ]
        ]
        assert "localsession-tiny" in names
        assert sm.meta.endpoint_url == m.url == runtime.meta.endpoint_url
        with pytest.raises(sm.exceptions.ResourceNotFound):
            sm.describe_training_session(TrainingSessionName="nope")
        with pytest.raises(runtime.exceptions.ClientError) as err:
            runtime.get_training_operation_result(trainingSessionName="nope", operationId="x")
        assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_s3_requests_reach_the_mock_in_process(socket_guard: None) -> None:
    """S3 calls for the mock's endpoint go to the same app, path-style (as against serve);
    whatever the app answers, nothing leaves the process."""
    import boto3
    from botocore.exceptions import ClientError

    seen: list[str] = []
    with localsession.mock(engine="fake") as m:
        s3 = boto3.client("s3")
        url = m.url
        assert s3.meta.endpoint_url == f"{url}/s3"  # serve's S3 routes, path-style
        s3.meta.events.register("before-send", lambda request, **_: seen.append(request.url))
        try:
            listed = s3.list_objects_v2(Bucket="bucket", Prefix="out/")
            assert listed.get("KeyCount", 0) == 0  # no package was saved under it
        except ClientError as exc:  # a bucket no session wrote to
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] in (403, 404)
    assert seen and seen[0].startswith(f"{url}/s3/bucket?list-type=2")


def test_get_tokenizer_for_every_listed_model_leaves_the_hf_cache_alone(
    socket_guard: None,
) -> None:
    from huggingface_hub import constants
    from sagemaker.train.training_session import ServiceClient

    cache = Path(constants.HF_HUB_CACHE)

    def snapshot() -> list[tuple[str, float]]:
        if not cache.is_dir():
            return []
        return sorted((str(p), p.stat().st_mtime) for p in cache.rglob("*"))

    before = snapshot()
    with localsession.mock(engine="fake", model_map=MAP) as m:
        svc = ServiceClient(
            role_arn=blog.ROLE, model_package_group_arn=blog.GROUP, s3_output_path=blog.S3
        )
        listed = svc.list_base_models()
        names = [
            c["HubContentName"] for c in m.service.list_hub_contents({})["HubContentSummaries"]
        ]
        assert {"localsession-tiny", "localsession-small", "openai-gpt-oss-20b"} <= set(names)
        assert len(listed) >= 2
        for name in names:
            with svc.create_lora_training_client(name, rank=4) as tc:
                assert tc.get_tokenizer().encode("hi")[-2:] == [104, 105], name
    assert snapshot() == before
