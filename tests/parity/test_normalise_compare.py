"""The pieces under record, replay and snapshots: normalisation of volatile values, and
the structural diff with its tolerances (checked against values worked out by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from localsession.parity.cassette import CassetteWriter, request_record, response_record
from localsession.parity.compare import DEFAULT_TOLERANCES, diff
from localsession.parity.normalise import (
    FIXED_EPOCH,
    FIXED_ISO,
    Normaliser,
    expand,
    strip_numbers,
)
from localsession.parity.replay import Replayer

ARN = "arn:aws:sagemaker:us-west-2:123456789012:model-package/g/3"
OP = "3572b281-3a81-4869-8e7b-231f72933a51"
NAME = "sagemaker-training-session-643b9203"
CREATE = "SageMaker.CreateTrainingSession"
SESSION_ARN = "arn:aws:sagemaker:us-west-2:123456789012:training-session"


def test_volatile_values_become_numbered_placeholders_by_first_appearance() -> None:
    norm = Normaliser()
    request = norm.value({"TrainingSessionName": "my-run", "RoleArn": ARN}, "c")
    assert request == {"TrainingSessionName": "<session:c1>", "RoleArn": "<arn:c1>"}
    response = norm.value(
        {
            "operationId": OP,
            "Arn": ARN,  # seen before: the same placeholder
            "CreationTime": 1796095947.63,
            "LastModifiedDate": "2026-12-01T03:00:00Z",
            "S3Uri": "s3://bucket/out/my-run/g/3/",
            "Note": f"{NAME} in account 123456789012",
            "RequestId": "abc",
            "loss": -6.499725818634033,
        },
        "s",
    )
    assert response == {
        "operationId": "<uuid:s1>",
        "Arn": "<arn:c1>",
        "CreationTime": FIXED_EPOCH,
        "LastModifiedDate": FIXED_ISO,
        "S3Uri": "s3://bucket/out/<session:c1>/g/3/",
        "Note": "<session:s2> in account 000000000000",
        "RequestId": "<request-id>",
        "loss": -6.499725818634033,  # floats are kept exactly
    }
    assert norm.examples["<arn:c1>"] == ARN.replace("123456789012", "000000000000")
    assert norm.path(f"/v1/training-sessions/my-run/operations/{OP}") == (
        "/v1/training-sessions/<session:c1>/operations/<uuid:s1>"
    )
    assert strip_numbers({"a": ["<uuid:s1>", "x/<arn:c2>/y"]}) == {"a": ["<uuid>", "x/<arn>/y"]}
    assert expand({"a": "/<uuid:s1>/"}, lambda p: "ID") == {"a": "/ID/"}


def test_numbers_compare_within_the_declared_tolerance() -> None:
    # rtol 1e-4, atol 1e-5: at 2.0 the limit is 1e-5 + 2e-4 = 2.1e-4.
    assert diff({"loss": 2.0}, {"loss": 2.0002}) == []
    lines = diff({"loss": 2.0}, {"loss": 2.0003})
    assert len(lines) == 1 and lines[0].startswith("$.loss: 2.0003, recorded 2.0")
    assert diff({"mfu": 0.1}, {"mfu": 0.9}) == []  # declared "any"
    assert diff([1, 2], [1, 3]) == ["$[1]: 3, recorded 2"]  # integers exactly
    tight = {"default": {"rtol": 0.0, "atol": 0.0}}
    assert diff({"x": 1.0}, {"x": 1.0 + 2**-52}, tight) != []
    assert DEFAULT_TOLERANCES["default"] == {"rtol": 1e-4, "atol": 1e-5}


def test_shapes_codes_and_fields_compare_exactly() -> None:
    recorded = {"error": {"code": "ValidationException", "status": 400}, "v": [1.0, 2.0]}
    got = {"error": {"code": "ThrottlingException", "status": 400}, "v": [1.0], "new": 1}
    assert diff(recorded, got) == [
        "$.new: not recorded (got 1)",
        "$.error.code: 'ThrottlingException', recorded 'ValidationException'",
        "$.v: length 1, recorded 2",
    ]
    assert diff({"a": 1, "b": 2}, {"a": 1}) == ["$.b: missing (recorded 2)"]
    assert diff({"a": "1"}, {"a": 1}) == ["$.a: 1, recorded '1'"]


def test_an_arn_is_normalised_part_by_part() -> None:
    norm = Normaliser()
    session_arn = "arn:aws:sagemaker:us-west-2:123456789012:training-session/my-run"
    # The ARN comes first (as in a describe), the name inside it is still a session name.
    got = norm.value({"TrainingSessionArn": session_arn, "TrainingSessionName": "my-run"}, "s")
    assert got == {
        "TrainingSessionArn": "arn:aws:sagemaker:us-west-2:000000000000:training-session/"
        "<session:s1>",
        "TrainingSessionName": "<session:s1>",
    }
    op_arn = f"arn:aws:sagemaker:us-west-2:123456789012:training-session/my-run/operation/{OP}"
    assert norm.value(op_arn, "s") == (
        "arn:aws:sagemaker:us-west-2:000000000000:training-session/<session:s1>/operation/<uuid:s1>"
    )
    default = f"arn:aws:sagemaker:us-west-2:123456789012:model-package/{NAME}/2"
    assert norm.value(default, "s") == (
        "arn:aws:sagemaker:us-west-2:000000000000:model-package/<session:s2>/2"
    )
    # Nothing volatile but the account: one placeholder, as before.
    assert norm.value(ARN, "s") == "<arn:s1>"


def test_a_replayed_session_gets_its_own_arn(tmp_path: Path) -> None:
    norm = Normaliser()
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": CREATE}
    recorded = {"TrainingSessionName": "run-a", "RoleArn": ARN}
    request = request_record(norm, "POST", "/", "", headers, json.dumps(recorded).encode())
    answer = {
        "TrainingSessionArn": "arn:aws:sagemaker:us-west-2:123456789012:training-session/run-a"
    }
    response = response_record(norm, 200, headers, json.dumps(answer).encode())
    writer = CassetteWriter(tmp_path, {"region": "us-west-2"})
    writer.exchange(request, response, lambda: dict(norm.examples))
    writer.close()

    replayer = Replayer.from_path(tmp_path)
    body = json.dumps({"TrainingSessionName": "run-b", "RoleArn": ARN}).encode()
    status, _, raw = replayer.answer("POST", "/", "", headers, body)
    assert status == 200 and replayer.misses == []
    zeroed = SESSION_ARN.replace("123456789012", "000000000000")
    assert json.loads(raw) == {"TrainingSessionArn": f"{zeroed}/run-b"}
