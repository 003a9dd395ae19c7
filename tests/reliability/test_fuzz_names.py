"""Fuzzed names, ARNs, bodies and paths: hostile strings never reach the filesystem, garbage
never gets a 500, and the server keeps answering.

Session names, model-package group names and model-package ARNs are checked against the
service patterns (docs/wire.md#2, #10; written out again in strategies.py) before any
path is built from them. The tests throw traversal (``..``), absolute paths, NUL bytes,
newlines and overlong names at every operation that takes one, in-process and on the wire, and
then check that nothing appeared outside the home and nothing odd inside it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localsession.runtime.errors import ServiceError

from . import strategies as S
from .conftest import FUZZ_PROFILES, FUZZED, HUB_ARN, PROFILES, Served

ROLE = "arn:aws:iam::123456789012:role/R"
_SAFE_PART = re.compile(r"\.?[A-Za-z0-9][A-Za-z0-9._-]*")


def _create_request(name: Any, group: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingSessionName": name,
        "LoraConfig": {"Rank": 4, "Alpha": 8},
        "RoleArn": ROLE,
        "ModelConfig": {"BaseModelArn": "no-such-model"},
    }
    if group is not None:
        request["ModelPackageGroupArn"] = group
    return request


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _assert_home_is_clean(home: Path) -> None:
    """Every entry under the home has a plain name: nothing hostile was used as a path."""
    for path in home.rglob("*"):
        for part in path.relative_to(home).parts:
            assert _SAFE_PART.fullmatch(part) and ".." not in part, path


def _expect_refused(
    served: Served, operation: str, body: dict[str, Any], field: str, valid: bool
) -> None:
    """In-process and on the wire: a ValidationException naming ``field`` unless ``valid``."""
    method = getattr(served.service, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())
    status, headers, answer = served.control(operation, body)
    assert status < 500, (operation, body, status, answer)
    try:
        method(body)
    except ServiceError as exc:
        code, message = exc.code, exc.message
    else:
        code, message = None, ""
    if valid:
        assert code != "ValidationException" or field not in message, (body, message)
    else:
        assert code == "ValidationException" and field in message, (body, code, message)
        assert answer["__type"] == "ValidationException" and field in answer["message"]


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_hostile_names_and_arns_never_touch_the_filesystem(
    served: Served, tmp_path: Path, profile: str
) -> None:
    outside = served.home.parent
    before = {p.name for p in outside.iterdir()}

    @PROFILES[profile]
    @given(S.hostile_text, S.hostile_arns)
    def run(name: str, arn: str) -> None:
        FUZZED[profile] += 1
        name_ok = S.is_session_name(name)
        arn_ok = S.is_package_arn(arn)
        # CreateTrainingSession: the name, then the group it would save into.
        if not name_ok:
            _expect_refused(
                served, "CreateTrainingSession", _create_request(name), "TrainingSessionName", False
            )
        else:
            group_arn = f"arn:aws:sagemaker:us-west-2:000000000000:model-package-group/{arn}"
            _expect_refused(
                served,
                "CreateTrainingSession",
                _create_request(name, group_arn),
                "ModelPackageGroupArn",
                S.is_session_name(arn),
            )
        # The registry: package ARNs and group names.
        _expect_refused(
            served, "DescribeModelPackage", {"ModelPackageName": arn}, "modelPackageArn", arn_ok
        )
        _expect_refused(
            served, "DeleteModelPackage", {"ModelPackageName": arn}, "modelPackageArn", arn_ok
        )
        _expect_refused(
            served,
            "ListModelPackages",
            {"ModelPackageGroupName": name},
            "model package group",
            name_ok,
        )
        if not name_ok:  # a valid name would create a real (harmless) group
            _expect_refused(
                served,
                "CreateModelPackageGroup",
                {"ModelPackageGroupName": name},
                "model package group",
                False,
            )
        # Runtime path labels: percent-encoded hostile names are 400/404, never 500.
        quoted = urllib.parse.quote(name, safe="")
        status, _, _ = served.request("GET", f"/v1/training-sessions/{quoted}/operations/x")
        assert status in (400, 404), (name, status)

    run()
    assert {p.name for p in outside.iterdir()} == before  # nothing appeared beside the home
    assert not Path("/tmp/pwned").exists()
    _assert_home_is_clean(served.home)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["sequenceNumber", "clientToken", "operationConfig", "x"]),
        json_values,
    ).map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"{", b"[]", b"null", b'{"a":', b"\xff\xfe", b'{"a": NaN}', b"{}" * 1000]),
)


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_garbage_bodies_get_a_validation_error_never_a_500(served: Served, profile: str) -> None:
    from .conftest import create_session

    name = create_session(served.service)
    targets = [
        ("/", {"X-Amz-Target": "SageMaker.CreateTrainingSession"}),
        ("/", {"X-Amz-Target": "SageMaker.DescribeTrainingSession"}),
        ("/", {"X-Amz-Target": "SageMaker.ListModelPackages"}),
        (f"/v1/training-sessions/{name}/operations", {}),
        (f"/v1/training-sessions/{name}/sampling-operations", {}),
    ]

    @PROFILES[profile]
    @given(bodies, st.sampled_from(targets))
    def run(body: bytes, target: tuple[str, dict[str, str]]) -> None:
        FUZZED[profile] += 1
        path, headers = target
        status, found, answer = served.request("POST", path, body, headers)
        assert 400 <= status < 500, (path, body, status, answer)
        code = answer.get("__type") if path == "/" else found.get("x-amzn-errortype")
        assert code in ("ValidationException", "ResourceNotFound", "ResourceInUse"), answer

    run()
    # Nothing got queued on the session, and it still takes a valid op.
    session = served.service.session(name)
    assert not session.ops
    assert session.status == "Running"
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_unknown_members_are_refused_as_botocore_would(served: Served) -> None:
    """The request shapes admit exactly the service model's members (botocore's own view)."""
    import botocore.session

    from localsession.runtime.validate import MEMBERS

    model = botocore.session.get_session().get_service_model("sagemakertrainingsessionruntime")
    execute = model.operation_model("ExecuteTrainingOperation").input_shape
    sampling = model.operation_model("ExecuteSamplingOperation").input_shape
    uri = {"trainingSessionName"}  # a path label, never in the body
    assert MEMBERS["ExecuteTrainingOperation"] == set(execute.members) - uri
    assert MEMBERS["ExecuteSamplingOperation"] == set(sampling.members) - uri
    config = execute.members["operationConfig"]
    for op in (
        "forward",
        "forwardBackward",
        "optimizerStep",
        "saveWeights",
        "saveState",
        "loadState",
    ):
        assert MEMBERS[op] == set(config.members[op].members), op
    fb = config.members["forwardBackward"].members
    datum = fb["datumList"].member
    assert MEMBERS["Datum"] == set(datum.members)
    assert MEMBERS["ModelInput"] == set(datum.members["modelInput"].members)
    assert MEMBERS["EncodedTextChunk"] == set(
        datum.members["modelInput"].members["chunks"].member.members
    )
    assert MEMBERS["TensorData"] == set(datum.members["lossFnInputs"].value.members)
    for op in ("sample", "computeLogprobs", "loadWeightsForSampling"):
        assert MEMBERS[op] == set(sampling.members["operationConfig"].members[op].members), op
    # And on the wire, one stray member anywhere is a 400 naming it.
    status, _, body = served.control(
        "CreateTrainingSession", {**_create_request("ok-name"), "Debug": True}
    )
    assert status == 400 and body["__type"] == "ValidationException" and "Debug" in body["message"]
    assert HUB_ARN
