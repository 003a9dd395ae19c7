"""``stop()`` and ``delete()`` with a slow op running and more queued behind it end the same
way in-process, over HTTP through the unmodified SDK, and in ``mock()`` (docs/semantics.md#4):

- stop: the running op finishes Completed and its result is read; the queued ops end
  Skipped ("stopped before this operation ran");
- delete: every op's future raises ``ResourceNotFoundException`` (the session is gone).

The running op is made slow with an injected fault (``Faults.slow_next``) that outlasts the
SDK's 5 s close wait (``SDK_CLOSE_WAIT_SECONDS``): with the server holding each training
submit for as long as its op ran, the queued ops were still in the SDK at ``stop()`` and
ended in "still in flight when its client closed", results lost. Stop and delete run on two
sessions at once, slowed on different op kinds, so each front end costs one slow op.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localsession import vocab
from localsession.runtime.service import Service, ServiceConfig
from localsession.server.app import SDK_CLOSE_WAIT_SECONDS
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.wiring import default_engine_factory

from .common import GROUP, REGION, ROLE, S3

#: Longer than the SDK's close wait plus the time to reach stop(): the case that lost results.
SLOW_S = SDK_CLOSE_WAIT_SECONDS + 1.5
STOPPED = "skipped: The session was stopped before this operation ran."
#: What each future reads, per action, in submit order (the first op is the slow one).
EXPECTED = {
    "stop": ["completed", STOPPED, STOPPED],
    "delete": ["ResourceNotFoundException"] * 3,
}


def _datum(ts: Any) -> Any:
    return ts.Datum(
        model_input=ts.ModelInput.from_ints([257, 1, 2]),
        loss_fn_inputs={"target_tokens": [1, 2, 3], "weights": [1.0, 1.0, 1.0]},
    )


def _outcome(future: Any) -> str:
    try:
        future.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code:
            return str(code)
        text = str(exc)
        if "stopped before" in text:
            return "skipped: " + text.partition(": ")[2]
        return f"{type(exc).__name__}: {text}"
    return "completed"


def _scenario(
    ts: Any, make_client: Callable[[], Any], service: Service, action: str, ready: Any
) -> tuple[list[str], list[str]]:
    """One session: warm up, then a slow op (the fault armed for this action's kind) and two
    queued behind it; ``action`` once the slow op runs. Returns what the futures read and the
    session's op statuses on the service just after the action."""
    tc = make_client().create_lora_training_client("localsession-tiny", rank=4)
    tc.forward_backward([_datum(ts), _datum(ts)], "cross_entropy").result(timeout=60)
    name = tc.training_session_name
    ready.wait()  # both sessions warm, then the faults are armed
    ready.wait()
    adam = ts.AdamParams(learning_rate=1e-3)
    if action == "stop":  # slow forwardBackward first
        futures = [
            tc.forward_backward([_datum(ts)], "cross_entropy"),
            tc.forward_backward([_datum(ts)], "cross_entropy"),
            tc.optim_step(adam),
        ]
    else:  # slow optimizerStep first
        futures = [
            tc.optim_step(adam),
            tc.forward_backward([_datum(ts)], "cross_entropy"),
            tc.forward_backward([_datum(ts)], "cross_entropy"),
        ]
    session = service.session(name)
    deadline = time.monotonic() + 30
    while session.running_op is None or session.running_op.seq == 1:
        assert time.monotonic() < deadline, "the slow op never started"
        time.sleep(0.02)
    if action == "stop":
        tc.stop()
        statuses = [op.status for op in sorted(session.ops.values(), key=lambda o: o.seq or 0)]
    else:
        tc.delete(stop_if_active=True)
        statuses = []
        assert name not in [s["TrainingSessionName"] for s in _listed(service)]
    return [_outcome(f) for f in futures], statuses


def _listed(service: Service) -> list[dict[str, Any]]:
    summaries: list[dict[str, Any]] = service.list_training_sessions({})["TrainingSessionSummaries"]
    return summaries


def _both(
    ts: Any, make_client: Callable[[], Any], service: Service, slow_s: float = SLOW_S
) -> dict[str, Any]:
    """Run the stop and the delete scenario at once on two sessions, the first op of each
    ``slow_s`` seconds long."""
    ready = threading.Barrier(3)
    results: dict[str, Any] = {}

    def run(action: str) -> None:
        try:
            results[action] = _scenario(ts, make_client, service, action, ready)
        except BaseException as exc:  # reported by the main thread
            results[action] = exc
            ready.abort()

    threads = [threading.Thread(target=run, args=(a,)) for a in EXPECTED]
    for thread in threads:
        thread.start()
    ready.wait()
    service.faults.slow_next("forwardBackward", slow_s)
    service.faults.slow_next("optimizerStep", slow_s)
    ready.wait()
    for thread in threads:
        thread.join(120)
    for value in results.values():
        if isinstance(value, BaseException):
            raise value
    return results


def _check(results: dict[str, Any]) -> None:
    for action, expected in EXPECTED.items():
        outcomes, statuses = results[action]
        assert outcomes == expected, action
    # every op reached the service before the stop: none was left in the client
    done, skip = vocab.OpStatus.COMPLETED, vocab.OpStatus.SKIPPED
    assert results["stop"][1] in (
        [done, vocab.OpStatus.IN_PROGRESS, skip, skip],
        [done, done, skip, skip],
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    service = Service(ServiceConfig(home=tmp_path, engine_factory=default_engine_factory))
    try:
        yield service
    finally:
        service.close()


def test_in_process(service: Service) -> None:
    import localsession as ts

    def client() -> Any:
        return ts.ServiceClient(
            role_arn=ROLE, backend=service, model_package_group_arn=GROUP, region=REGION
        )

    _check(_both(ts, client, service, slow_s=1.0))  # in-process, the length does not matter


@pytest.mark.integration
def test_over_http_through_the_sdk(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    import sagemaker.train.training_session as ts

    with ServerThread(service) as url:  # the default submit hold
        for key, value in client_env(url, REGION).items():
            monkeypatch.setenv(key, value)

        def client() -> Any:
            return ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)

        _check(_both(ts, client, service))


@pytest.mark.integration
@pytest.mark.slow  # default-tier time (docs/development.md)
def test_in_mock() -> None:
    import sagemaker.train.training_session as ts

    import localsession

    with localsession.mock() as mocked:
        assert os.environ.get("SAGEMAKER_TRAINING_SESSION_ENDPOINT")

        def client() -> Any:
            return ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)

        _check(_both(ts, client, mocked.service))
