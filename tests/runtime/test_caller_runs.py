"""A waiting caller runs its own training op (runtime/sessions/runner.py).

With a recording engine that notes the thread each op ran on: which ops a caller may run
(quick kinds, no time limit, an engine that allows it, no gap), that they still run one at a
time in sequence order, that a stop waits for a caller's op before the engine closes, that
an interrupted op fails alone, and how Ctrl-C is held on the main thread.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from testkit import StubEngine, create_request, forward_backward

from localsession.port import EngineSpec, LossConfig, TrainingDatum
from localsession.port_results import ForwardResult
from localsession.runtime.models.catalog import StaticCatalog
from localsession.runtime.service import Service, ServiceConfig
from localsession.runtime.sessions import runner
from localsession.runtime.sessions.runner import interrupts_held
from localsession.wiring import build_service


class ThreadEngine(StubEngine):
    """Records the thread of every forward(_backward); ``delay`` seconds each; ``gate``, when
    set, holds each forward until it opens; ``allow`` answers ``runs_in_caller``."""

    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec)
        self.threads: list[str] = []
        self.delay = 0.0
        self.allow = True
        self.gate: threading.Event | None = None
        self.raise_in: BaseException | None = None
        self.running = 0
        self.closed_while_running = False

    def runs_in_caller(self) -> bool:
        return self.allow

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        self.running += 1
        try:
            self.threads.append(threading.current_thread().name)
            if self.gate is not None:
                assert self.gate.wait(10)
            time.sleep(self.delay)
            if self.raise_in is not None:
                raise self.raise_in
            return super().forward_backward(datums, loss_fn, loss_fn_config, backward=backward)
        finally:
            self.running -= 1

    def close(self) -> None:
        self.closed_while_running = self.running > 0


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A session over a :class:`ThreadEngine`. A submit wakes the worker, but the submitting
    thread keeps the GIL until it next blocks, so its ``run_here`` comes first, as in a
    user's loop; a long switch interval stops a loaded box pre-empting it mid-test. An op
    counts as quick up to 30 s (not 0.1 s), so a box too busy to run a no-op in 0.1 s does
    not send the ops these tests expect on the caller to the worker."""
    monkeypatch.setattr(runner, "QUICK_S", 30.0)
    engines: list[ThreadEngine] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(2.0)

    def factory(spec: EngineSpec) -> ThreadEngine:
        engines.append(ThreadEngine(spec))
        return engines[-1]

    config = ServiceConfig(home=tmp_path, engine_factory=factory, gap_timeout=5)
    service = build_service(config, catalog=StaticCatalog(["localsession/tiny"], accept_any=True))
    service.create_training_session(create_request("s1"))
    assert service.wait_for_session("s1", 10) == "Running"
    yield service, engines[0]
    service.close()
    sys.setswitchinterval(interval)


def submit(service: Service, seq: int) -> str:
    return str(service.execute_training_operation("s1", forward_backward(seq, seq))["operationId"])


def wait_done(service: Service, op_id: str) -> str:
    assert service.wait_operation("s1", op_id, 10)
    return str(service.get_training_operation_result("s1", op_id)["status"])


def warmed(service: Service) -> None:
    """One forwardBackward through the worker, so the kind has a (quick) duration."""
    assert wait_done(service, submit(service, 1)) == "Completed"


def test_a_quick_op_runs_on_the_waiting_callers_thread(runtime: Any) -> None:
    service, engine = runtime
    first = submit(service, 1)
    service.run_here("s1", first)  # never ran: its duration is unknown, so the worker runs it
    assert wait_done(service, first) == "Completed"
    second = submit(service, 2)
    assert service.run_here("s1", second) is True  # ran here: finished when it returns
    assert service.operation("s1", second).status == "Completed"
    assert engine.threads == ["localsession-s1", threading.current_thread().name]
    assert engine.calls == ["fb1", "fb2"]


def test_the_caller_runs_the_queued_ops_before_its_own_in_order(runtime: Any) -> None:
    service, engine = runtime
    warmed(service)
    engine.gate = threading.Event()  # the worker takes op 2 and holds it
    two = submit(service, 2)
    deadline = time.monotonic() + 5
    while service.operation("s1", two).status == "Pending" and time.monotonic() < deadline:
        time.sleep(0.001)
    three, four = submit(service, 3), submit(service, 4)
    assert service.run_here("s1", four) is False  # op 2 runs on the worker: none runs here
    assert service.operation("s1", four).status == "Pending"
    engine.gate.set()
    assert wait_done(service, two) == "Completed"
    engine.gate = None
    for op_id in (three, four):
        wait_done(service, op_id)
    five, six = submit(service, 5), submit(service, 6)
    service.run_here("s1", six)
    assert [service.operation("s1", i).status for i in (five, six)] == ["Completed"] * 2
    assert engine.calls == ["fb1", "fb2", "fb3", "fb4", "fb5", "fb6"]
    assert engine.threads[-2:] == [threading.current_thread().name] * 2


def test_slow_kinds_disallowed_engines_and_gaps_stay_on_the_worker(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, engine = runtime
    monkeypatch.setattr(runner, "QUICK_S", 0.1)  # the real threshold: an op sleeping past it
    engine.delay = runner.QUICK_S + 0.05
    warmed(service)  # this forwardBackward was slow
    slow = submit(service, 2)
    service.run_here("s1", slow)
    assert wait_done(service, slow) == "Completed"
    engine.delay = 0.0
    warmed_again = submit(service, 3)
    assert wait_done(service, warmed_again) == "Completed"  # quick again
    engine.allow = False
    barred = submit(service, 4)
    service.run_here("s1", barred)
    assert wait_done(service, barred) == "Completed"
    engine.allow = True
    later = submit(service, 6)  # number 5 is missing: a gap
    service.run_here("s1", later)
    assert service.operation("s1", later).status == "Pending"
    wait_done(service, submit(service, 5))
    assert wait_done(service, later) == "Completed"
    assert threading.current_thread().name not in engine.threads
    assert engine.calls == ["fb1", "fb2", "fb3", "fb4", "fb5", "fb6"]


def caller_in_its_op(service: Service, engine: ThreadEngine) -> tuple[threading.Thread, str]:
    """A user's thread named "caller" that submits op 2 and runs it itself, held inside the
    engine by a closed gate; returns once the op runs (the thread and the op's id)."""
    warmed(service)
    engine.gate = threading.Event()
    ids: list[str] = []

    def loop() -> None:  # a user's thread: submit, then wait on the op
        ids.append(submit(service, 2))
        service.run_here("s1", ids[0])

    caller = threading.Thread(target=loop, name="caller")
    caller.start()
    deadline = time.monotonic() + 5
    while engine.running == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    return caller, ids[0]


def test_the_worker_and_a_stop_wait_for_the_callers_op(runtime: Any) -> None:
    service, engine = runtime
    caller, op_id = caller_in_its_op(service, engine)
    assert engine.threads[-1] == "caller"
    queued = submit(service, 3)
    time.sleep(0.1)  # the worker must not start op 3 beside the caller's op
    assert engine.running == 1 and service.operation("s1", queued).status == "Pending"
    service.stop_training_session({"TrainingSessionName": "s1"})
    session = service.session("s1")
    session.runner.join(0.2)  # the worker waits for the caller's op
    assert session.runner.worker.is_alive()
    engine.gate.set()
    caller.join(5)
    session.runner.join(5)
    assert not session.runner.worker.is_alive() and not engine.closed_while_running
    assert service.operation("s1", op_id).status == "Completed"
    assert service.operation("s1", queued).status == "Skipped"


def test_an_op_queued_behind_the_callers_goes_to_the_worker_when_it_ends(runtime: Any) -> None:
    """The caller runs only up to its own op; one queued behind it meanwhile is the
    worker's, which must be woken when the caller's op ends (it waits while one runs)."""
    service, engine = runtime
    caller, _ = caller_in_its_op(service, engine)
    later = submit(service, 3)
    engine.gate.set()
    caller.join(5)
    assert wait_done(service, later) == "Completed"
    assert engine.threads == ["localsession-s1", "caller", "localsession-s1"]


def test_an_interrupted_op_fails_alone_and_later_ops_run(runtime: Any) -> None:
    service, engine = runtime
    warmed(service)
    engine.raise_in = KeyboardInterrupt()
    op_id = submit(service, 2)
    with pytest.raises(KeyboardInterrupt):
        service.run_here("s1", op_id)
    op = service.operation("s1", op_id)
    assert op.status == "Failed" and "interrupted" in (op.error or "")
    engine.raise_in = None
    assert wait_done(service, submit(service, 3)) == "Completed"


def notifies(service: Service) -> list[str]:
    """Every wake-up call on session s1's condition from now on, by calling thread."""
    session = service.session("s1")
    calls: list[str] = []
    real = session.cond.notify_all

    def counted() -> None:
        calls.append(threading.current_thread().name)
        real()

    session.cond.notify_all = counted  # type: ignore[method-assign]
    return calls


def callers_ran_in_a_row(service: Service, first_seq: int) -> int:
    """Ops ``first_seq``.. run on this thread until submits leave the worker asleep; the
    next sequence number."""
    seq = first_seq
    for seq in range(first_seq, first_seq + runner.CALLERS_IN_A_ROW):
        assert service.run_here("s1", submit(service, seq)) is True
    return seq + 1


def test_once_callers_run_their_ops_a_submit_leaves_the_worker_asleep(runtime: Any) -> None:
    service, engine = runtime
    warmed(service)  # ran on the worker: submits wake it
    calls = notifies(service)
    submit_seq = callers_ran_in_a_row(service, 2)
    me = threading.current_thread().name
    assert calls[0] == me  # the first submit woke the worker
    calls.clear()
    op_id = submit(service, submit_seq)
    assert calls == []  # this one did not: its caller runs it
    assert service.run_here("s1", op_id) is True
    assert engine.threads[-1] == me


def test_an_op_no_one_waits_for_still_runs_on_the_worker_soon(runtime: Any) -> None:
    service, engine = runtime
    warmed(service)
    seq = callers_ran_in_a_row(service, 2)
    left = submit(service, seq)  # submitted and left: no wait, no run_here
    started = time.monotonic()
    while service.operation("s1", left).status != "Completed":
        assert time.monotonic() - started < 5, "the worker never looked for the op"
        time.sleep(0.005)
    assert engine.threads[-1] == "localsession-s1"
    calls = notifies(service)
    submit(service, seq + 1)
    assert calls  # the worker ran one no caller came for: submits wake it again


def test_a_waiter_that_does_not_run_its_op_wakes_the_worker(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the worker looking only every 60 s, only the waiter's wake can start the op in
    time, through each way of waiting: a blocking wait and a callback (await, long poll)."""
    service, engine = runtime
    monkeypatch.setattr(runner, "LOOKOUT_S", 60.0)
    warmed(service)
    seq = callers_ran_in_a_row(service, 2)
    engine.allow = False  # runs_in_caller says no: the caller must wait for the worker
    barred = submit(service, seq)
    assert service.run_here("s1", barred) is False
    assert wait_done(service, barred) == "Completed"
    engine.allow = True
    seq = callers_ran_in_a_row(service, seq + 1)
    called = threading.Event()
    service.on_operation_done("s1", submit(service, seq), called.set)
    assert called.wait(5)
    assert engine.threads[-1] == "localsession-s1"


def test_an_idle_session_stops_looking_and_submits_wake_its_worker_again(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, _ = runtime
    monkeypatch.setattr(runner, "LOOKOUT_S", 0.02)
    monkeypatch.setattr(runner, "IDLE_S", 0.1)
    warmed(service)
    seq = callers_ran_in_a_row(service, 2)
    time.sleep(0.5)  # idle: the worker's look finds nothing for longer than IDLE_S
    calls = notifies(service)
    op_id = submit(service, seq)
    assert calls == [threading.current_thread().name]
    assert wait_done(service, op_id) == "Completed"


def test_ctrl_c_is_held_until_the_block_ends_on_the_main_thread() -> None:
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held() as held:
                assert held
                signal.raise_signal(signal.SIGINT)
                reached.append("after the first Ctrl-C")
        assert reached == ["after the first Ctrl-C"]
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C raises at once
            with interrupts_held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                reached.append("after the second")
        assert reached == ["after the first Ctrl-C"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        def custom(signum: int, frame: Any) -> None:
            pass

        signal.signal(signal.SIGINT, custom)
        with interrupts_held() as held:
            assert not held  # another handler: nothing is held, and it stays installed
        assert signal.getsignal(signal.SIGINT) is custom
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job inherits
        with interrupts_held() as held:
            assert held  # nothing can interrupt the block
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_other_threads_get_no_signal_so_nothing_needs_holding() -> None:
    seen: list[bool] = []

    def probe() -> None:
        with interrupts_held() as held:
            seen.append(held)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(5)
    assert seen == [True]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_holds_ctrl_c_on_the_thread_that_forked() -> None:
    """The child's main thread is the one that forked, here not the parent's main thread."""
    outcome: list[int] = []

    def fork_and_wait() -> None:
        pid = os.fork()
        if pid == 0:  # the child: this thread is its main thread now
            code = 3
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                with interrupts_held() as held:
                    signal.raise_signal(signal.SIGINT)  # held, not raised in the block
                    code = 2 if held else 4
            except KeyboardInterrupt:
                code = 0 if code == 2 else 5  # raised once the block ended
            finally:
                os._exit(code)
        outcome.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    thread = threading.Thread(target=fork_and_wait)
    thread.start()
    thread.join(30)
    assert outcome == [0]
