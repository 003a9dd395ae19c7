"""Beside moto's ``mock_aws``: moto keeps S3 (and everything else it mocks), localsession
serves the training sessions; the one conflict is named."""

from __future__ import annotations

import os

import pytest
from mock_blog import GROUP, ROLE, S3

import localsession

moto = pytest.importorskip("moto")


def test_alongside_mock_aws(socket_guard: None) -> None:
    import boto3
    from sagemaker.train.training_session import AdamParams, ServiceClient

    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="user-data")
        with localsession.mock(engine="fake") as m:
            assert "AWS_ENDPOINT_URL_S3" not in os.environ  # S3 stays moto's
            inside = boto3.client("s3", region_name="us-east-1")
            inside.put_object(Bucket="user-data", Key="k", Body=b"from inside")
            svc = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
            with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
                tc.optim_step(AdamParams(learning_rate=1e-3)).result()
            assert m.calls.methods() == ["optim_step"]
            sessions = boto3.client("sagemaker").list_training_sessions()
            assert len(sessions["TrainingSessionSummaries"]) == 1  # localsession's, not moto's
        assert s3.get_object(Bucket="user-data", Key="k")["Body"].read() == b"from inside"


def test_mock_aws_started_inside_is_a_named_conflict(socket_guard: None) -> None:
    import boto3

    with localsession.mock(engine="fake"), moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        with pytest.raises(RuntimeError, match="S3 conflict: moto's mock_aws was started inside"):
            s3.list_buckets()
