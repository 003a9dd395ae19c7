"""The error map of runtime/errors.py: codes with the statuses botocore models, op details."""

from __future__ import annotations

import botocore.session
import pytest

from localsession.port import EngineInputError
from localsession.runtime import errors


def _modelled_statuses() -> dict[str, int]:
    model = botocore.session.get_session().get_service_model("sagemakertrainingsessionruntime")
    return {
        name: model.shape_for(name).metadata["error"]["httpStatusCode"]
        for name in model.shape_names
        if model.shape_for(name).metadata.get("exception")
    }


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (errors.validation, "ValidationException"),
        (errors.conflict, "ConflictException"),
        (errors.throttling, "ThrottlingException"),
        (lambda m: errors.not_found(m, runtime=True), "ResourceNotFoundException"),
    ],
)
def test_runtime_refusals_carry_the_modelled_status(make: object, code: str) -> None:
    exc = make("why")  # type: ignore[operator]
    assert (exc.code, exc.message, exc.http_status) == (code, "why", _modelled_statuses()[code])


def test_control_plane_refusals_are_400() -> None:
    for exc in (
        errors.not_found("x", runtime=False),
        errors.resource_in_use("x"),
        errors.limit_exceeded("x"),
    ):
        assert exc.http_status == 400
    assert errors.not_found("x", runtime=False).code == "ResourceNotFound"


def test_op_error_details() -> None:
    refused = errors.conflict("session stopped")
    assert errors.op_error_details(refused, "running x") == "session stopped"
    bad = EngineInputError("datum 0: `weights` is missing")
    assert errors.op_error_details(bad, "running x", (EngineInputError,)) == str(bad)
    crash = KeyError("boom")
    expected = "Internal error while sampling: KeyError('boom')"
    assert errors.op_error_details(crash, "sampling") == expected
