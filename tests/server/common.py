"""Constants and types the server tests share."""

from __future__ import annotations

from dataclasses import dataclass

from localsession.runtime.service import Service

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"
S3 = "s3://bucket/out"
REGION = "us-west-2"


@dataclass
class Running:
    """A server on a background thread: its URL and the service behind it."""

    url: str
    service: Service
