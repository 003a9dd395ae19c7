"""``--backend=remote``: the real managed service through the real SDK.

Configured by options or environment (``--remote-region`` / ``CONFORMANCE_REGION``,
``--remote-role`` / ``CONFORMANCE_ROLE_ARN``, ``--remote-base-model`` /
``CONFORMANCE_BASE_MODEL``, ``--remote-group`` / ``CONFORMANCE_GROUP_ARN``,
``--remote-s3`` / ``CONFORMANCE_S3_OUTPUT``). Without AWS credentials, or with a setting
missing, every test is skipped and the reason says what is missing. The real service declares
none of localsession's local decisions unless ``--capabilities`` says otherwise.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

from conformance.adapter import Backend, BackendUnavailable, Limits
from conformance.artifacts import s3_package_files
from conformance.backends.common import xfail_file

SETTINGS = {
    "region": "CONFORMANCE_REGION",
    "role": "CONFORMANCE_ROLE_ARN",
    "base_model": "CONFORMANCE_BASE_MODEL",
    "group": "CONFORMANCE_GROUP_ARN",
    "s3": "CONFORMANCE_S3_OUTPUT",
}


def make_remote(options: dict[str, Any]) -> Backend:
    values = {key: options.get(key) or os.environ.get(env) for key, env in SETTINGS.items()}
    missing = [
        f"--remote-{k.replace('_', '-')} / {SETTINGS[k]}" for k, v in values.items() if not v
    ]
    if missing:
        raise BackendUnavailable(f"remote backend not configured: set {', '.join(missing)}")
    try:
        import boto3
        import sagemaker.train.training_session as ts
    except ImportError as exc:
        raise BackendUnavailable(f"remote backend needs sagemaker-train and boto3: {exc}") from None
    session = boto3.Session(region_name=values["region"])
    if session.get_credentials() is None:
        raise BackendUnavailable("remote backend: no AWS credentials found (boto3 found none)")

    def client() -> Any:
        return ts.ServiceClient(
            values["region"],
            role_arn=values["role"],
            model_package_group_arn=values["group"],
            s3_output_path=values["s3"],
        )

    def usage(name: str) -> dict[str, int]:
        detail = session.client("sagemaker").describe_training_session(TrainingSessionName=name)
        return {k: int(v) for k, v in detail["TrainingSessionDetail"]["BillableTokenUsage"].items()}

    capabilities = options.get("capabilities") or frozenset()
    return Backend(
        name="remote",
        version=f"{values['region']} via sagemaker-train "
        f"{importlib.metadata.version('sagemaker-train')}",
        ts=ts,
        base_model=str(values["base_model"]),
        service_client=client,
        strict_client=client,
        capabilities=frozenset(capabilities),
        limits=Limits(
            min_max_tokens=512, op_timeout_s=1800.0, logprob_mse=1e-2, rank=8, logprob_atol=5e-2
        ),
        decode=None,
        eos_token_id=None,
        billable_usage=usage if "accounting.tokens" in capabilities else None,
        package_files=lambda arn: s3_package_files(arn, session),
        xfail_file=options.get("xfail_file") or xfail_file("remote"),
        details={"region": str(values["region"]), "base_model": str(values["base_model"])},
    )
