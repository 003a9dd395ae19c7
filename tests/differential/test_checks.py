"""The checks made before any request, against the real SDK with no server behind it:
the region rule, and botocore's parameter validation of control-plane calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import localsession
from localsession.runtime.service import Service

from ._sdk import sdk

ROLE = "arn:aws:iam::123456789012:role/differential"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/differential"
S3 = "s3://differential-bucket/out"
ARN = "arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/localsession-tiny/1.0.0"


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No region, no credentials and no config anywhere: the SDK can reach no service."""
    for key in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SAGEMAKER",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _raised(fn: Callable[[], Any]) -> type[BaseException] | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return type(exc)
    return None


def test_no_region_anywhere_is_the_sdks_value_error(no_aws: None, service: Service) -> None:
    theirs = _raised(lambda: sdk.ServiceClient(role_arn=ROLE))
    mine = _raised(lambda: localsession.ServiceClient(role_arn=ROLE, backend=service))
    assert theirs is ValueError and mine is ValueError
    with pytest.raises(ValueError, match="Pass region="):
        localsession.ServiceClient(role_arn=ROLE, backend=service)


CASES: dict[str, Callable[[Any], Any]] = {
    "rank 0": lambda c: c.create_lora_training_client(ARN, rank=0),
    "rank -3": lambda c: c.create_lora_training_client(ARN, rank=-3),
    "alpha 0": lambda c: c.create_lora_training_client(ARN, rank=8, alpha=0),
    "rank as text": lambda c: c.create_lora_training_client(ARN, rank="8"),
    "empty subnets": lambda c: c.create_lora_training_client(
        ARN, rank=8, vpc_config={"subnets": [], "security_group_ids": ["sg-1"]}
    ),
    "stop ''": lambda c: c.stop_session(""),
    "delete ''": lambda c: c.delete_session(""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_control_plane_checks_raise_what_the_sdk_raises(
    case: str, no_aws: None, service: Service
) -> None:
    kwargs = {"role_arn": ROLE, "model_package_group_arn": GROUP, "s3_output_path": S3}
    theirs = _raised(lambda: CASES[case](sdk.ServiceClient("us-west-2", **kwargs)))
    mine = _raised(
        lambda: CASES[case](localsession.ServiceClient("us-west-2", backend=service, **kwargs))
    )
    assert theirs is not None and theirs.__name__ == "ParamValidationError"
    assert mine is theirs


def test_a_short_role_is_refused_before_any_request(no_aws: None, service: Service) -> None:
    kwargs = {"role_arn": "arn:short", "model_package_group_arn": GROUP, "s3_output_path": S3}
    theirs = _raised(
        lambda: sdk.ServiceClient("us-west-2", **kwargs).create_lora_training_client(ARN, rank=8)
    )
    mine = _raised(
        lambda: localsession.ServiceClient(
            "us-west-2", backend=service, **kwargs
        ).create_lora_training_client(ARN, rank=8)
    )
    assert theirs is not None and mine is theirs
