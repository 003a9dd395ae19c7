"""``done()`` against the installed SDK's futures: False until a wait learns the outcome.

The SDK documents that a future nobody has waited on reports ``done() == False`` even when its
op has finished, and that a failed *request* (a poll that raised) is no outcome. Two parts:

- the futures that resolve in stages (``PendingAPIFuture``, ``CombinedFuture``) are driven side
  by side with the SDK's own classes through the same scripted inner futures;
- one public-API scenario (an op finished but not waited on, then waited on; an op whose
  session was deleted before anyone polled it) runs on the unmodified SDK inside
  ``localsession.mock`` (so the SDK's futures answer), and must give the same ``done()`` trace
  in-process, in the fakes, and under the fakes' manual clock. Over HTTP, the conformance
  suite's ``test_futures.py`` checks the same (``localsession conformance --backend=http``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

import localsession
from fakes import FakeServiceClient
from localsession import ServiceClient
from localsession.client import _staged as our_staged

from ._sdk import our_futures, outcome, sdk_futures

TOKENS = [257, 104, 101, 108, 108, 111]


def _gone() -> ClientError:
    error = {"Code": "ResourceNotFoundException", "Message": "no such session"}
    return ClientError(
        {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 404}},  # type: ignore[typeddict-item]
        "GetTrainingOperationResult",
    )


class Script:
    """Poll answers for one inner future: each entry is a status or ``"gone"`` (raises)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)

    def poll(self) -> dict[str, Any]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "gone":
            raise _gone()
        body: dict[str, Any] = {"status": answer}
        if answer == "Failed":
            body["errorDetails"] = "boom"
        return body


def _inner(futures: Any, answers: list[str]) -> Any:
    script = Script(answers)
    return futures.APIFuture(
        "op-1",
        script.poll,
        lambda body: body["status"],
        operation_type="training",
        poll_interval=0.0,
        sleep_fn=lambda _s: None,
        max_transient_poll_errors=0,
    )


def _submitted(value: Any = None, error: BaseException | None = None) -> Any:
    sent: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is not None:
        sent.set_exception(error)
    else:
        sent.set_result(value)
    return sent


def _pending_trace(futures: Any, pending: Callable[..., Any]) -> list[Any]:
    """``done()`` of a pending future at each step of five stories."""
    trace: list[Any] = []
    # 1. The op completed, nobody waited; then someone waited on the inner future only.
    inner = _inner(futures, ["Completed"])
    outer = pending(_submitted(inner), operation_type="training")
    trace.append(outer.done())
    inner.result(1)
    trace += [inner.done(), outer.done()]
    # 2. A wait on the outer future.
    trace += [outcome(lambda: outer.result(1))[0], outer.done()]
    # 3. A poll that fails (the session is gone), then one that answers.
    inner = _inner(futures, ["gone", "Completed"])
    outer = pending(_submitted(inner), operation_type="training")
    first = outcome(lambda: outer.result(1))
    trace += [first[0], type(first[1]).__name__, outer.done(), inner.done()]
    trace += [outcome(lambda: outer.result(1))[0], outer.done()]
    # 4. The op failed: an outcome.
    outer = pending(_submitted(_inner(futures, ["Failed"])), operation_type="training")
    failed = outcome(lambda: outer.result(1))
    trace += [failed[0], type(failed[1]).__name__, outer.done()]
    # 5. The submit itself was refused: no outcome of the op.
    outer = pending(_submitted(error=_gone()), operation_type="training")
    trace += [outcome(lambda: outer.result(1))[0], outer.done()]
    return trace


def test_pending_futures_report_done_as_the_sdk() -> None:
    mine = _pending_trace(our_futures, our_staged.PendingAPIFuture)
    theirs = _pending_trace(sdk_futures, sdk_futures.PendingAPIFuture)
    assert mine == theirs
    # Read as the SDK documents it (not only "equal"): not done until waited on.
    assert theirs[:3] == [False, True, False]


def _combined_trace(futures: Any, combined: Callable[..., Any]) -> list[Any]:
    parts = [_inner(futures, ["Completed"]), _inner(futures, ["Completed"])]
    whole = combined(parts, lambda values: values)
    trace: list[Any] = [whole.done()]
    for part in parts:
        part.result(1)
    trace.append(whole.done())  # every chunk waited on directly: the whole still is not
    trace += [whole.result(1), whole.done()]
    broken = combined([_inner(futures, ["gone", "Completed"])], lambda values: values)
    trace += [outcome(lambda: broken.result(1))[0], broken.done()]
    return trace


def test_combined_futures_report_done_as_the_sdk() -> None:
    mine = _combined_trace(our_futures, our_staged.CombinedFuture)
    theirs = _combined_trace(sdk_futures, sdk_futures.CombinedFuture)
    assert mine == theirs
    assert theirs[:2] == [False, False]


# -- the public-API scenario -----------------------------------------------------------------


def _datum(ts: Any) -> Any:
    return ts.Datum(
        model_input=ts.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
    )


def _scenario(svc: Any, ts: Any, settle: Callable[[], None] = lambda: None) -> list[Any]:
    """``done()`` of a finished-but-unwaited op, after its wait, and after a failed poll.

    ``settle`` runs every queued op (the manual clock's ``run_until_idle``; a no-op else).
    """
    tc = svc.create_lora_training_client("localsession/tiny", rank=4)
    first = tc.forward([_datum(ts)], "cross_entropy")
    second = tc.forward([_datum(ts)], "cross_entropy")
    settle()
    second.result(60)  # training ops run in order: `first` has finished on the service
    trace: list[Any] = [first.done()]
    first.result(60)
    trace.append(first.done())
    orphan = tc.forward([_datum(ts)], "cross_entropy")
    last = tc.forward([_datum(ts)], "cross_entropy")
    settle()
    last.result(60)
    tc.delete(stop_if_active=True)
    failed = outcome(lambda: orphan.result(10))
    trace += [failed[0], getattr(failed[1], "response", {}).get("Error", {}).get("Code")]
    trace.append(orphan.done())
    return trace


@pytest.fixture(scope="module")
def sdk_trace() -> list[Any]:
    """The scenario on the unmodified SDK (its own futures), inside the fake-engine mock."""
    with localsession.mock(engine="fake"):
        import sagemaker.train.training_session as ts

        svc = ts.ServiceClient(
            role_arn="arn:aws:iam::123456789012:role/R", s3_output_path="s3://b/o"
        )
        trace = _scenario(svc, ts)
    assert trace == [False, True, "raised", "ResourceNotFoundException", False]
    return trace


def test_in_process_done_equals_the_sdk(sdk_trace: list[Any], client: ServiceClient) -> None:
    assert _scenario(client, localsession) == sdk_trace


def test_fakes_done_equals_the_sdk(sdk_trace: list[Any]) -> None:
    with FakeServiceClient() as fake:
        assert _scenario(fake, localsession) == sdk_trace


def test_manual_clock_done_equals_the_sdk(sdk_trace: list[Any]) -> None:
    with FakeServiceClient(manual=True) as fake:
        assert _scenario(fake, localsession, settle=fake.run_until_idle) == sdk_trace
