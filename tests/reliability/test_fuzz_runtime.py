"""Fuzzed runtime requests, in-process (the Service) and as raw wire requests (the server).

Every invalid request is refused the way the spec says (a 400 ValidationException at submit,
or an op that finishes Failed when it runs), with a message naming the field; after each one
the session still works and nothing changed: a follow-up ``forward`` gives bit-for-bit the
baseline result, and at the end an optimizer step lands exactly where it lands in a session
that never saw a bad request (so no bad op added gradient or moved the sequence state).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localsession.runtime import validate
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service

from . import strategies as S
from .conftest import FUZZ_PROFILES, FUZZED, PROFILES, Served, create_session, run_op

D0 = {
    "modelInput": {"chunks": [{"tokens": [257, 104, 105, 33], "type": "encoded_text"}]},
    "lossFnInputs": {
        "target_tokens": {"data": [104, 105, 33, 258], "dtype": "int64", "shape": [4]},
        "weights": {"data": [1.0, 1.0, 1.0, 1.0], "dtype": "float32", "shape": [4]},
    },
}
FB = {"forwardBackward": {"lossFnName": "cross_entropy", "datumList": [D0]}}
FWD = {"forward": {"lossFnName": "cross_entropy", "datumList": [D0]}}
STEP = {"optimizerStep": {"adamParamsConfig": {"learningRate": 0.01}}}


@dataclass
class Tracked:
    """A session under fuzz: its next sequence number and its baseline forward result."""

    name: str
    next_seq: int
    baseline: dict[str, Any]
    refused: int = 0
    failed: int = 0
    log: list[str] = field(default_factory=list)


def _start(service: Service) -> Tracked:
    """A session with one gradient accumulated (fb) and its baseline forward."""
    name = create_session(service)
    assert run_op(service, name, 1, FB)["status"] == "Completed"
    baseline = run_op(service, name, 2, FWD)
    assert baseline["status"] == "Completed"
    return Tracked(name, 3, baseline["operationResult"]["forward"])


def _finish(service: Service, tracked: Tracked) -> None:
    """Step and compare with a session that saw only the valid ops."""
    after = run_op(service, tracked.name, tracked.next_seq, STEP)
    assert after["status"] == "Completed", after
    loss = run_op(service, tracked.name, tracked.next_seq + 1, FWD)["operationResult"]
    reference = create_session(service)
    for seq, config in enumerate((FB, STEP), start=1):
        assert run_op(service, reference, seq, config)["status"] == "Completed"
    expected = run_op(service, reference, 3, FWD)["operationResult"]
    assert loss["forward"]["metrics"]["loss"] == expected["forward"]["metrics"]["loss"]
    assert loss["forward"]["lossFnOutputs"] == expected["forward"]["lossFnOutputs"]
    for name in (tracked.name, reference):
        service.stop_training_session({"TrainingSessionName": name})


def _untimed(forward: dict[str, Any]) -> dict[str, Any]:
    """A forward result without ``mfu``, the one metric that times the op."""
    return {**forward, "metrics": {k: v for k, v in forward["metrics"].items() if k != "mfu"}}


def _prepare(bad: S.Bad, seq: int) -> dict[str, Any]:
    """The bad request, numbered as the session's next op (unless the number is the bug)."""
    request = copy.deepcopy(bad.request)
    if bad.field != "sequenceNumber":
        request["sequenceNumber"] = seq
    if bad.field != "clientToken":
        request["clientToken"] = f"fuzz-{seq}"
    return request


def _follow_up(service: Service, tracked: Tracked) -> None:
    """The session still works, and a forward gives exactly the baseline."""
    result = run_op(service, tracked.name, tracked.next_seq, FWD)
    tracked.next_seq += 1
    assert result["status"] == "Completed", result
    assert _untimed(result["operationResult"]["forward"]) == _untimed(tracked.baseline)


def _check_in_process(service: Service, tracked: Tracked, bad: S.Bad) -> None:
    request = _prepare(bad, tracked.next_seq)
    if bad.stage == S.SUBMIT:
        with pytest.raises(ServiceError) as refused:
            service.execute_training_operation(tracked.name, request)
        assert refused.value.code == "ValidationException", (bad, refused.value)
        assert refused.value.http_status == 400
        assert bad.field in refused.value.message, (bad, refused.value.message)
        tracked.refused += 1
    else:
        op = service.execute_training_operation(tracked.name, request)["operationId"]
        assert service.wait_operation(tracked.name, op, 60)
        result = service.get_training_operation_result(tracked.name, op)
        tracked.next_seq += 1
        assert result["status"] == "Failed", (bad, result)
        assert "datum 0" in result["errorDetails"] and bad.field in result["errorDetails"], (
            bad,
            result,
        )
        tracked.failed += 1
    _follow_up(service, tracked)


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_invalid_training_requests_in_process(served: Served, profile: str) -> None:
    tracked = _start(served.service)

    @PROFILES[profile]
    @given(S.bad_training_requests())
    def run(bad: S.Bad) -> None:
        FUZZED[profile] += 1
        _check_in_process(served.service, tracked, bad)

    run()
    assert tracked.refused and tracked.failed  # both stages were exercised
    _finish(served.service, tracked)


def _check_wire(served: Served, tracked: Tracked, bad: S.Bad) -> None:
    request = _prepare(bad, tracked.next_seq)
    path = f"/v1/training-sessions/{tracked.name}/operations"
    status, headers, body = served.request("POST", path, json.dumps(request).encode())
    if bad.stage == S.SUBMIT:
        assert status == 400, (bad, status, body)
        assert headers["x-amzn-errortype"] == "ValidationException", (bad, headers)
        assert bad.field in body["message"], (bad, body)
        tracked.refused += 1
    else:
        assert status == 200, (bad, status, body)
        op = body["operationId"]
        status, _, result = served.request("GET", f"{path}/{op}")
        while result["status"] in ("Pending", "InProgress"):
            status, _, result = served.request("GET", f"{path}/{op}")
        tracked.next_seq += 1
        assert result["status"] == "Failed", (bad, result)
        assert "datum 0" in result["errorDetails"] and bad.field in result["errorDetails"]
        tracked.failed += 1
    _follow_up(served.service, tracked)


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_invalid_training_requests_over_the_wire(served: Served, profile: str) -> None:
    tracked = _start(served.service)

    @PROFILES[profile]
    @given(S.bad_training_requests())
    def run(bad: S.Bad) -> None:
        FUZZED[profile] += 1
        _check_wire(served, tracked, bad)

    run()
    assert tracked.refused and tracked.failed
    _finish(served.service, tracked)


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_invalid_sampling_requests_in_process_and_on_the_wire(served: Served, profile: str) -> None:
    name = create_session(served.service)

    @PROFILES[profile]
    @given(S.bad_sampling_requests())
    def run(bad: S.Bad) -> None:
        FUZZED[profile] += 1
        with pytest.raises(ServiceError) as refused:
            served.service.execute_sampling_operation(name, copy.deepcopy(bad.request))
        assert refused.value.code == "ValidationException", (bad, refused.value)
        assert bad.field in refused.value.message, (bad, refused.value.message)
        path = f"/v1/training-sessions/{name}/sampling-operations"
        status, headers, body = served.request("POST", path, json.dumps(bad.request).encode())
        assert (status, headers["x-amzn-errortype"]) == (400, "ValidationException"), body
        assert bad.field in body["message"]

    run()
    assert not served.service.session(name).ops  # nothing was accepted
    served.service.stop_training_session({"TrainingSessionName": name})


@pytest.mark.parametrize("profile", FUZZ_PROFILES)
def test_valid_requests_are_accepted(served: Served, profile: str) -> None:
    """Valid forwards run and answer one output per datum and one value per token; valid
    sampling, optimizer and loss configs pass the submit checks."""
    tracked = _start(served.service)

    @PROFILES[profile]
    @given(
        S.forward_requests(),
        S.sampling_params,
        S.adam_params,
        S.model_inputs(),
        st.integers(1, 1000),
    )
    def run(
        config: dict[str, Any],
        params: dict[str, Any],
        adam: dict[str, Any],
        prompt: dict[str, Any],
        n: int,
    ) -> None:
        FUZZED[profile] += 1
        result = run_op(served.service, tracked.name, tracked.next_seq, config)
        tracked.next_seq += 1
        assert result["status"] == "Completed", (config, result)
        outputs = result["operationResult"]["forward"]["lossFnOutputs"]
        datums = config["forward"]["datumList"]
        assert len(outputs) == len(datums)
        for datum, out in zip(datums, outputs, strict=True):
            values = out["logprobs"]["data"]
            assert len(values) == S.length(datum["modelInput"])
            assert all(math.isfinite(v) and v <= 0 for v in values)
        sample = {"sample": {"prompt": prompt, "numSamples": n, "samplingParams": params}}
        validate.sampling_request({"operationConfig": sample}, strict=True)
        validate.training_request(
            {"sequenceNumber": 1, "operationConfig": {"optimizerStep": {"adamParamsConfig": adam}}},
            strict=True,
        )

    run()
    # Forwards change nothing: the session is where the baseline left it.
    _follow_up(served.service, tracked)
    served.service.stop_training_session({"TrainingSessionName": tracked.name})
