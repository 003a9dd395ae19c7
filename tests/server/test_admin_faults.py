"""Fault injection through ``/_localsession/faults``, as the unmodified SDK experiences it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from .common import Running


def _fault(server: Running, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        server.url + "/_localsession/faults", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _batch(ts: Any) -> list[Any]:
    return [
        ts.Datum(
            model_input=ts.ModelInput.from_ints([257, 1, 2, 3]),
            loss_fn_inputs={"target_tokens": [1, 2, 3, 258], "weights": [1.0] * 4},
        )
    ]


def test_execution_fault_fails_one_op_and_the_session_keeps_working(
    server: Running, sdk: Any
) -> None:
    import sagemaker.train.training_session as ts

    with sdk.create_lora_training_client(base_model="localsession-tiny", rank=4) as tc:
        assert (
            _fault(server, {"fail": {"kind": "optimizerStep", "message": "injected OOM"}})[0] == 200
        )
        tc.forward_backward(_batch(ts), "cross_entropy").result()
        with pytest.raises(ts.OperationError, match="injected OOM"):
            tc.optim_step(ts.AdamParams(learning_rate=1e-3)).result()
        tc.optim_step(ts.AdamParams(learning_rate=1e-3)).result()  # the next one runs


def test_throttling_is_retried_by_the_sdk(server: Running, sdk: Any) -> None:
    import sagemaker.train.training_session as ts

    with sdk.create_lora_training_client(base_model="localsession-tiny", rank=4) as tc:
        assert _fault(server, {"throttle": 2})[0] == 200
        result = tc.forward_backward(_batch(ts), "cross_entropy").result()
        assert result.metrics["loss"] > 0
        assert server.service.faults.pending()["throttle"] == 0  # both were consumed


def test_expired_session_refuses_new_ops(server: Running, sdk: Any) -> None:
    import sagemaker.train.training_session as ts

    # Every SDK client in these tests is stopped explicitly: left to the garbage collector, its
    # auto-stop could run on the in-process server's event-loop thread and wait on itself.
    with sdk.create_lora_training_client(base_model="localsession-tiny", rank=4) as tc:
        assert _fault(server, {"expire": tc.training_session_name})[0] == 200
        with pytest.raises(ClientError) as refused:
            tc.forward_backward(_batch(ts), "cross_entropy").result()
        assert refused.value.response["Error"]["Code"] == "ConflictException"


@pytest.mark.parametrize(
    "body",
    [
        {"fail": {"kind": "nope"}},
        {"throttle": -1},
        {"bogus": 1},
        {"fail": {"kind": "sample", "at": "later"}},
    ],
)
def test_bad_fault_requests_are_refused_with_the_reason(
    server: Running, body: dict[str, Any]
) -> None:
    status, answer = _fault(server, body)
    assert status == 400 and answer["message"]
    assert server.service.faults.armed is False
