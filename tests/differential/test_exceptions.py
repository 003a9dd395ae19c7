"""localsession.exceptions against the SDK's: retryability, messages, attributes, pickling."""

from __future__ import annotations

import pickle
from typing import Any

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from ._sdk import our_exceptions, sdk_exceptions

CODES = [
    "ThrottlingException",
    "InternalServerException",
    "ValidationException",
    "ResourceNotFoundException",
    "ConflictException",
    "ServiceUnavailable",
    "",
]


@st.composite
def client_errors(draw: Any) -> ClientError:
    response: dict[str, Any] = {}
    if draw(st.booleans()):
        response["Error"] = {"Code": draw(st.sampled_from(CODES)), "Message": "m"}
    if draw(st.booleans()):
        status = draw(st.one_of(st.none(), st.sampled_from([200, 400, 404, 429, 500, 502, 503])))
        status = draw(st.one_of(st.just(status), st.integers(100, 599), st.just("500")))
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, draw(st.sampled_from(["GetTrainingOperationResult", "X"])))


errors = st.one_of(
    client_errors(),
    st.sampled_from(
        [
            EndpointConnectionError(endpoint_url="http://x"),
            ReadTimeoutError(endpoint_url="http://x"),
            ConnectTimeoutError(endpoint_url="http://x"),
            HTTPClientError(error="reset"),
            NoCredentialsError(),
            ParamValidationError(report="bad"),
            ValueError("v"),
            TimeoutError("t"),
            RuntimeError("r"),
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(error=errors)
def test_is_retryable_agrees(error: BaseException) -> None:
    assert our_exceptions.is_retryable(error) == sdk_exceptions.is_retryable(error)


text = st.text(max_size=20)


@st.composite
def constructions(draw: Any) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    kind = draw(st.sampled_from(["op", "mismatch", "artifacts", "base"]))
    if kind == "op":
        details = draw(st.one_of(text, st.dictionaries(text, st.integers(), max_size=2)))
        op_id = draw(st.one_of(st.none(), text))
        return "OperationError", (draw(text), details), {"operation_id": op_id}
    if kind == "mismatch":
        ints = st.integers(-5, 10**6)
        return "ResultMismatchError", (draw(text), draw(ints), draw(ints)), {}
    if kind == "artifacts":
        keys = draw(st.lists(text, max_size=9))
        return "ArtifactDeletionError", (draw(text), draw(text), keys), {}
    return "TrainingSessionError", (draw(text),), {}


ATTRS = ["args", "operation_type", "operation_id", "message", "expected", "received"]
ATTRS += ["model_package_arn", "s3_uri", "failed_keys"]


def _describe(error: BaseException) -> Any:
    return (
        type(error).__name__,
        [c.__name__ for c in type(error).__mro__],
        str(error),
        repr(error),
        {a: getattr(error, a) for a in ATTRS if hasattr(error, a)},
    )


@settings(max_examples=200, deadline=None)
@given(made=constructions())
def test_errors_read_and_pickle_alike(made: tuple[str, tuple[Any, ...], dict[str, Any]]) -> None:
    name, args, kwargs = made
    mine = getattr(our_exceptions, name)(*args, **kwargs)
    theirs = getattr(sdk_exceptions, name)(*args, **kwargs)
    assert _describe(mine) == _describe(theirs)
    assert _describe(pickle.loads(pickle.dumps(mine))) == _describe(
        pickle.loads(pickle.dumps(theirs))
    )
    assert isinstance(mine, our_exceptions.TrainingSessionError)
