"""A request the Tinker dialect refuses still uses its sequence number: the next request,
sent at once through the unmodified SDK, runs without waiting for the refused one.

The SDK numbers every request (``seq_id``) before the server sees it. The server here waits
600 s for a missing number, so a valid request queued behind a refused one that had not
been reported would not finish within the test's wait: finishing at all is the check.
"""

from __future__ import annotations

import dataclasses
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
