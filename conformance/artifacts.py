"""A saved model package's files, read back the way a user reads them: from S3.

Every SageMaker save (``save_state``, ``save_weights_for_sampler``) is a model package whose
``DescribeModelPackage`` answer names its artifacts' ``S3Uri``
(``InferenceSpecification.Containers[0].ModelDataSource.S3DataSource.S3Uri``); the files
are the S3 objects under it. :func:`s3_package_files` reads them with boto3 against whatever
endpoints the environment names (AWS, or ``serve``'s ``/s3`` route), which is every wire
backend's default; :func:`runtime_package_files` reads them from an in-process service's
registry through the same S3 view ``serve`` answers with (runtime/packages/artifacts.py), for
backends that have no endpoint. Either way the suite sees ``{path under the URI: bytes}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PackageFiles = Callable[[str], dict[str, bytes]]


def s3_uri(detail: dict[str, Any]) -> str:
    """The artifacts' ``s3://bucket/prefix/`` of a DescribeModelPackage answer."""
    try:
        container = detail["InferenceSpecification"]["Containers"][0]
        return str(container["ModelDataSource"]["S3DataSource"]["S3Uri"])
    except (KeyError, IndexError, TypeError):
        raise AssertionError(
            "DescribeModelPackage names no InferenceSpecification.Containers[0]."
            f"ModelDataSource.S3DataSource.S3Uri: {detail!r:.300}"
        ) from None


def _split(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"


def s3_package_files(arn: str, session: Any = None) -> dict[str, bytes]:
    """The package's files through boto3 (``session``: a ``boto3.Session``, default the
    environment's): DescribeModelPackage, then ListObjectsV2 and GetObject under its
    ``S3Uri``."""
    import boto3

    session = session or boto3.Session()
    uri = s3_uri(session.client("sagemaker").describe_model_package(ModelPackageName=arn))
    bucket, prefix = _split(uri)
    s3 = session.client("s3")
    files: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            files[obj["Key"][len(prefix) :]] = body
    return files


def runtime_package_files(service: Any) -> PackageFiles:
    """A reader over an in-process service (localsession's ``Service``, or a
    ``FakeService`` around one): its DescribeModelPackage, then the registry's S3 view."""
    from localsession.runtime.packages.artifacts import Artifacts

    runtime = getattr(service, "runtime", service)

    def read(arn: str) -> dict[str, bytes]:
        uri = s3_uri(service.describe_model_package({"ModelPackageName": arn}))
        bucket, prefix = _split(uri)
        artifacts = Artifacts(runtime.registry)
        files: dict[str, bytes] = {}
        token: str | None = None
        while True:
            page = artifacts.list(bucket, prefix, token=token)
            for obj in page.objects:
                files[obj.key[len(prefix) :]] = obj.path.read_bytes()
            if not page.truncated:
                return files
            token = page.next_token

    return read
