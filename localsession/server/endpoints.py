"""The environment that points an unmodified SDK, boto3 or the AWS CLI at a localsession URL.

Kept apart from ``runner`` (which imports uvicorn) so that ``localsession.mock()``, which
needs only these variables, imports no HTTP server.
"""

from __future__ import annotations


def client_env(url: str, region: str) -> dict[str, str]:
    """The environment an unmodified SDK, boto3 or AWS CLI needs to talk to ``url``."""
    return {
        "SAGEMAKER_TRAINING_SESSION_ENDPOINT": url,
        "SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT": url,
        "AWS_ENDPOINT_URL_SAGEMAKER": url,
        "AWS_ENDPOINT_URL_SAGEMAKERTRAININGSESSIONRUNTIME": url,
        "AWS_ENDPOINT_URL_S3": f"{url}/s3",  # the artifacts (server/s3.py)
        "AWS_ACCESS_KEY_ID": "localsession",
        "AWS_SECRET_ACCESS_KEY": "localsession",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
