"""Constants and types the server tests share."""

from __future__ import annotations

from testkit import Served

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"
S3 = "s3://bucket/out"
REGION = "us-west-2"

#: A server on a background thread: its URL, the service behind it and its home (the
#: ``tests/testkit.running_server`` fixture's value).
Running = Served
