"""A request the Tinker dialect refuses still uses its sequence number: the next request,
sent at once through the unmodified SDK, runs without waiting for the refused one.

The SDK numbers every request (``seq_id``) before the server sees it. The server here waits
600 s for a missing number, so a valid request queued behind a refused one that had not
been reported would not finish within the test's wait: finishing at all is the check.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

#: Seconds a missing sequence number holds later ops on this test's server.
GAP_S = 600.0
#: How long a request that should run at once may take (a loaded machine included).
WAIT_S = 120.0


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import TinkerServer

    served = TinkerServer("fake")
    # every session made from now on (the config is frozen: the service's is replaced; a
    # fake service wraps the runtime service, whose config the sessions read)
    runtime = served.service.runtime
    runtime.config = dataclasses.replace(runtime.config, gap_timeout=GAP_S)
    try:
        with scoped_environ(served.environment()):
            yield served
    finally:
        served.close()


def _datum() -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4]},
    )


def test_a_refused_request_does_not_hold_up_the_next(server: Any) -> None:
    tc = tinker.ServiceClient().create_lora_training_client(base_model="localsession/tiny", rank=4)
    # refused by the dialect before it reaches the runtime: an unknown loss_fn_config key
    refused = tc.forward_backward([_datum()], "cross_entropy", loss_fn_config={"bogus": 1.0})
    with pytest.raises(Exception, match="loss_fn_config has unknown key 'bogus'"):
        refused.result(timeout=WAIT_S)
    done = tc.forward_backward([_datum()], "cross_entropy").result(timeout=WAIT_S)
    assert done.loss_fn_outputs[0]["logprobs"].tolist()  # it ran
    # refused while building the checkpoint path (a name with '/'), then a valid step
    with pytest.raises(Exception, match="must be a plain name"):
        tc.save_state("a/b").result(timeout=WAIT_S)
    step = tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=WAIT_S)
    assert "grad_norm" in step.metrics
    # the runtime's record agrees: no op waits for an earlier number
    for session in server.service.sessions():
        assert not any(session.waits_for_earlier(op_id) for op_id in list(session.ops))


def _post(server: Any, path: str, raw: bytes) -> tuple[int, str, dict[str, Any]]:
    """(status, content type, JSON body) of a raw POST to the server's Tinker routes."""
    env = server.environment()
    request = urllib.request.Request(
        env["TINKER_BASE_URL"].rstrip("/") + path,
        data=raw,
        headers={"Content-Type": "application/json", "X-API-Key": env["TINKER_API_KEY"]},
    )
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, answer.headers["content-type"], json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers["content-type"], json.loads(refused.read())


def test_a_seq_id_that_is_no_small_integer_is_refused_and_holds_nothing(server: Any) -> None:
    """A seq_id far past the next number (10**40 ran a server out of memory walking the
    gap), one that is no integer (JSON's 1e999 is a float, inf: a 500 before), and a body
    nested too deeply for the parser (a 500 on every JSON route) answer 400 naming the
    problem; the SDK's next request runs at once."""
    service_client = tinker.ServiceClient()
    tc = service_client.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
    adam = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}
    body = {"model_id": tc.model_id, "adam_params": adam, "type": "optim_step"}
    far = json.dumps({**body, "seq_id": 10**40}).encode()
    inf = json.dumps({**body, "seq_id": 1}).replace('"seq_id": 1', '"seq_id": 1e999').encode()
    for raw, words in (
        (far, "at most 10000 ahead"),
        (inf, "seq_id=inf must be an integer >= 1"),
        (b"[" * 100_000, "nested too deeply"),
    ):
        status, kind, answer = _post(server, "/api/v1/optim_step", raw)
        assert (status, kind) == (400, "application/json") and words in answer["detail"]
    step = tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=WAIT_S)
    assert "grad_norm" in step.metrics
