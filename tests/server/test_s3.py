"""Model artifacts in S3 terms (issue 16 item 4): packages report ``s3://`` URIs under the
session's S3 output path; plain boto3 S3 calls list, head, download and delete them; the
unmodified SDK's ``delete_model_package(arn, delete_artifacts=True)`` removes the files.

The reference for every byte is the registry's own directory on disk.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from localsession.runtime.packages.registry import INDEX_FILE, RETAINED_FILE
from localsession.server.endpoints import client_env

from .common import S3, Running

MODEL = "localsession-tiny"


@pytest.fixture
def s3(server: Running, sdk_env: Callable[[Running], None]) -> Any:
    sdk_env(server)
    return boto3.client("s3")


def _files(folder: Path) -> dict[str, bytes]:
    skip = {INDEX_FILE, RETAINED_FILE}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not (p.parent == folder and p.name in skip)
    }


def _location(sdk: Any, arn: str) -> tuple[str, str, str]:
    """(S3Uri, bucket, key prefix) of a package, as DescribeModelPackage reports it."""
    described = sdk._get_model_registry_client().describe_model_package(ModelPackageName=arn)
    source = described["InferenceSpecification"]["Containers"][0]["ModelDataSource"]
    uri = source["S3DataSource"]["S3Uri"]
    assert source["S3DataSource"]["S3DataType"] == "S3Prefix"
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return uri, bucket, prefix


def _list_all(s3: Any, bucket: str, prefix: str, **extra: Any) -> list[dict[str, Any]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, **extra)
    return [obj for page in pages for obj in page.get("Contents", [])]


def test_a_merged_package_lists_and_downloads_byte_identically(
    sdk: Any, s3: Any, server: Running, tmp_path: Path
) -> None:
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        arn = tc.save_weights_for_sampler(merge_weights=True).result().model_package_arn
        session = tc.training_session_name
    uri, bucket, prefix = _location(sdk, arn)
    assert uri.startswith(S3 + "/") and uri.endswith("/")
    assert uri == f"{S3}/{session}/g/{arn.rsplit('/', 1)[1]}/"  # <path>/<session>/<group>/<v>/
    on_disk = _files(server.service.registry.path(arn))
    assert "merged/config.json" in on_disk and "adapter_model.safetensors" in on_disk

    listed = _list_all(s3, bucket, prefix)
    assert [o["Key"] for o in listed] == [prefix + k for k in on_disk]
    for obj in listed:
        data = on_disk[obj["Key"][len(prefix) :]]
        assert obj["Size"] == len(data)
        assert obj["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    # two keys a page: the continuation tokens walk the same keys
    paged = _list_all(s3, bucket, prefix, PaginationConfig={"PageSize": 2})
    assert [o["Key"] for o in paged] == [o["Key"] for o in listed]
    # a delimiter folds merged/ into one common prefix
    top = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == [prefix + "merged/"]
    assert all("/" not in o["Key"][len(prefix) :] for o in top["Contents"])

    for key, data in on_disk.items():
        assert s3.get_object(Bucket=bucket, Key=prefix + key)["Body"].read() == data
        head = s3.head_object(Bucket=bucket, Key=prefix + key)
        assert head["ContentLength"] == len(data)
    # boto3's transfer manager (ranged GETs for large objects), as `aws s3 cp` does
    weights = next(k for k in on_disk if k.startswith("merged/") and k.endswith(".safetensors"))
    target = tmp_path / "model.safetensors"
    s3.download_file(bucket, prefix + weights, str(target))
    assert target.read_bytes() == on_disk[weights]
    ranged = s3.get_object(Bucket=bucket, Key=prefix + weights, Range="bytes=10-19")
    assert ranged["Body"].read() == on_disk[weights][10:20]
    assert ranged["ContentRange"] == f"bytes 10-19/{len(on_disk[weights])}"


def test_delete_artifacts_through_the_sdk_removes_the_files(
    sdk: Any, s3: Any, server: Running
) -> None:
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        deleted_arn = tc.save_state("to delete").result().model_package_arn
        kept_arn = tc.save_weights_for_sampler("to keep").result().model_package_arn
    folder = server.service.registry.path(deleted_arn)
    count = len(_files(folder))
    uri, bucket, prefix = _location(sdk, deleted_arn)

    result = sdk.delete_model_package(deleted_arn, delete_artifacts=True)
    assert result.model_package_deleted and not result.artifacts_retained
    assert result.objects_deleted == count >= 4 and result.s3_uri == uri
    assert not folder.exists()
    assert _list_all(s3, bucket, prefix) == []
    assert sdk.delete_model_package(deleted_arn).model_package_deleted is False

    # without delete_artifacts the objects stay where they were, as in S3
    kept_uri, kept_bucket, kept_prefix = _location(sdk, kept_arn)
    kept_files = _files(server.service.registry.path(kept_arn))
    kept = sdk.delete_model_package(kept_arn)
    assert kept.artifacts_retained and kept.s3_uri == kept_uri
    listed = _list_all(s3, kept_bucket, kept_prefix)
    assert [o["Key"] for o in listed] == [kept_prefix + k for k in kept_files]
    # ...until the user deletes them with plain S3 calls
    s3.delete_objects(
        Bucket=kept_bucket, Delete={"Objects": [{"Key": o["Key"]} for o in listed], "Quiet": True}
    )
    assert _list_all(s3, kept_bucket, kept_prefix) == []
    assert not any((server.service.config.home / "retained").glob("g-*"))


def test_s3_bad_input(sdk: Any, s3: Any, server: Running) -> None:
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        arn = tc.save_weights_for_sampler().result().model_package_arn
    _, bucket, prefix = _location(sdk, arn)
    for key in (prefix + "nope.bin", prefix + "../" + INDEX_FILE, prefix + INDEX_FILE, prefix):
        with pytest.raises(ClientError) as err:
            s3.get_object(Bucket=bucket, Key=key)
        assert err.value.response["Error"]["Code"] == "NoSuchKey", key
    with pytest.raises(ClientError) as head:
        s3.head_object(Bucket=bucket, Key=prefix + "nope.bin")
    assert head.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as token:
        s3.list_objects_v2(Bucket=bucket, ContinuationToken="!!not-ours!!")
    assert token.value.response["Error"]["Code"] == "InvalidArgument"
    with pytest.raises(ClientError) as rng:
        s3.get_object(Bucket=bucket, Key=prefix + "adapter_config.json", Range="bytes=999999-")
    assert rng.value.response["Error"]["Code"] == "InvalidRange"
    with pytest.raises(ClientError) as far:  # 30 digits: read, and past the object
        s3.get_object(
            Bucket=bucket, Key=prefix + "adapter_config.json", Range="bytes=" + "9" * 30 + "-"
        )
    assert far.value.response["Error"]["Code"] == "InvalidRange"
    # more digits than int() reads (5,000: a 500 before) is a range S3 cannot parse: ignored
    whole = s3.get_object(Bucket=bucket, Key=prefix + "adapter_config.json")["Body"].read()
    huge = s3.get_object(
        Bucket=bucket, Key=prefix + "adapter_config.json", Range="bytes=" + "9" * 5000 + "-"
    )
    assert huge["Body"].read() == whole
    assert s3.list_objects_v2(Bucket="another-bucket")["KeyCount"] == 0
    s3.delete_object(Bucket=bucket, Key=prefix + "nope.bin")  # absent: succeeds, as in S3
    # a DeleteObjects body that is not XML is refused, and nothing is deleted
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.request("POST", f"/s3/{bucket}?delete", body=b"<Delete><Object>", headers={})
    answer = conn.getresponse()
    assert answer.status == 400 and b"<Code>MalformedXML</Code>" in answer.read()
    assert _list_all(s3, bucket, prefix)
    conn.request("PUT", f"/s3/{bucket}/x", body=b"data")
    answer = conn.getresponse()
    assert answer.status == 405 or b"NotImplemented" in answer.read()


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_aws_cli_copies_a_merged_model(sdk: Any, server: Running, tmp_path: Path) -> None:
    """``aws s3 ls`` / ``aws s3 cp --recursive`` with the printed exports, as a user would."""
    with sdk.create_lora_training_client(base_model=MODEL, rank=4, alpha=8) as tc:
        arn = tc.save_weights_for_sampler(merge_weights=True).result().model_package_arn
    uri, _, _ = _location(sdk, arn)
    env = {**os.environ, **client_env(server.url, "us-west-2")}
    listed = subprocess.run(
        ["aws", "s3", "ls", "--recursive", uri],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert listed.returncode == 0, listed.stderr
    merged = _files(server.service.registry.path(arn) / "merged")
    assert sum("/merged/" in line for line in listed.stdout.splitlines()) == len(merged)
    copied = subprocess.run(
        ["aws", "s3", "cp", "--recursive", uri + "merged/", str(tmp_path / "model")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert copied.returncode == 0, copied.stderr
    assert _files(tmp_path / "model") == merged
