"""The sampling scheduler on its own, with a stub engine that answers at once: how it groups
concurrent jobs, how fast a lone job runs, and that generation never runs on two threads."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from localsession.port import EngineInputError, SampleRequest
from localsession.port_results import LogprobsResult, SampledSequence, SampleResult
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.scheduler import SamplingScheduler, make_job

GENERATING = threading.Lock()  # shared by every stub engine: held while one "generates"


class StubEngine:
    """Records each batch; fails any batch holding a request whose prompt starts with -1."""

    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[tuple[str | None, list[int]]] = []
        self.delay = delay

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        assert GENERATING.acquire(blocking=False), "two generations ran at once"
        try:
            self.batches.append((weights, [r.seed for r in requests]))
            time.sleep(self.delay)
            if any(r.prompt[0] == -1 for r in requests):
                raise EngineInputError("prompt holds token id -1")
            return [
                SampleResult([SampledSequence([r.seed], [-1.0], "length")] * r.num_samples)
                for r in requests
            ]
        finally:
            GENERATING.release()

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        self.batches.append((weights, [-1]))
        return [None] + [-1.0] * (len(tokens) - 1)


class StubSession:
    status = "Running"

    def __init__(self, engine: StubEngine) -> None:
        self.engine = engine

    def add_sample_usage(self, prefill: int, decode: int) -> None:
        pass


@pytest.fixture
def scheduler() -> Iterator[SamplingScheduler]:
    sched = SamplingScheduler()
    yield sched
    sched.close()


def submit(
    sched: SamplingScheduler,
    session: Any,
    seed: int,
    weights: str | None = None,
    prompt: list[int] | None = None,
) -> Operation:
    op = Operation(kind="sample", id=str(uuid.uuid4()))
    request = SampleRequest(prompt=prompt or [1, 2], num_samples=4, seed=seed)
    sched.submit(make_job(session, op, weights, request, request.prompt))
    return op


def test_a_lone_request_runs_without_waiting_for_company() -> None:
    """A lone request is taken after the short quiet period, not the gathering cap: with a
    10 s cap it still finishes far sooner (a bound loose enough for a loaded CI machine)."""
    scheduler = SamplingScheduler(gather_max_s=10.0)
    try:
        session = StubSession(StubEngine())
        for _ in range(3):
            started = time.monotonic()
            op = submit(scheduler, session, seed=1)
            assert op.done.wait(10)
            assert time.monotonic() - started < 5.0
        assert op.status == "Completed" and op.result is not None
        assert op.result.sequences[0].tokens == [1]
    finally:
        scheduler.close()


def test_a_burst_of_submits_is_one_batch() -> None:
    # A wide quiet window, so a loaded machine pausing this thread cannot split the burst.
    scheduler = SamplingScheduler(gather_quiet_s=0.5, gather_max_s=10.0)
    try:
        _burst_is_one_batch(scheduler)
    finally:
        scheduler.close()


def _burst_is_one_batch(scheduler: SamplingScheduler) -> None:
    engine = StubEngine()
    session = StubSession(engine)
    ops = []
    for i in range(32):
        ops.append(submit(scheduler, session, seed=i))
        time.sleep(0.0005)  # submits arrive a little apart, as from a Python loop
    assert all(op.done.wait(5) for op in ops)
    assert [seeds for _, seeds in engine.batches] == [list(range(32))]
    assert [op.result.sequences[0].tokens for op in ops if op.result] == [[i] for i in range(32)]


def test_batches_group_by_weights_and_queue_while_busy(scheduler: SamplingScheduler) -> None:
    engine = StubEngine(delay=0.2)
    session = StubSession(engine)
    first = submit(scheduler, session, seed=0)
    time.sleep(0.1)  # the first batch is generating now; the rest queue behind it
    ops = [
        submit(scheduler, session, seed=i, weights="pkg" if i % 2 else None) for i in range(1, 7)
    ]
    assert first.done.wait(5) and all(op.done.wait(5) for op in ops)
    # oldest job first: seed 1 (pkg) leads the second batch
    assert engine.batches == [(None, [0]), ("pkg", [1, 3, 5]), (None, [2, 4, 6])]


def test_a_failing_request_does_not_fail_its_batch(scheduler: SamplingScheduler) -> None:
    engine = StubEngine()
    session = StubSession(engine)
    ops = [submit(scheduler, session, seed=i, prompt=[-1] if i == 2 else None) for i in range(4)]
    assert all(op.done.wait(5) for op in ops)
    assert [op.status for op in ops] == ["Completed", "Completed", "Failed", "Completed"]
    assert "-1" in (ops[2].error or "")
    assert engine.batches[0][1] == [0, 1, 2, 3]  # tried together first, then one by one


def test_a_batch_whose_failure_handling_fails_ends_alone(
    scheduler: SamplingScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory while logging a crashed batch ended the one sampling thread, and every
    later sample on the server stayed Pending: the batch's ops fail, the next batch runs."""
    from localsession.runtime.sessions import scheduler as module

    session = StubSession(StubEngine())
    real = module.logger.exception
    calls: list[int] = []

    def out_of_memory(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError
        real(*args, **kwargs)

    monkeypatch.setattr(module.logger, "exception", out_of_memory)
    monkeypatch.setattr(
        StubEngine, "sample", lambda self, w, r: (_ for _ in ()).throw(RuntimeError("bad_alloc"))
    )
    first = submit(scheduler, session, seed=1)
    assert first.done.wait(5) and first.status == "Failed"
    assert first.error == "sampling failed: MemoryError"
    monkeypatch.undo()
    later = submit(scheduler, session, seed=2)
    assert later.done.wait(5) and later.status == "Completed"


def test_sessions_never_generate_at_once(scheduler: SamplingScheduler) -> None:
    sessions = [StubSession(StubEngine(delay=0.01)) for _ in range(3)]
    ops: list[Operation] = []

    def burst(session: StubSession) -> None:
        for i in range(5):
            ops.append(submit(scheduler, session, seed=i))

    threads = [threading.Thread(target=burst, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ops) == 15 and all(op.done.wait(10) for op in ops)
    assert all(op.status == "Completed" for op in ops)  # a concurrent run would have failed


def test_close_waits_for_the_running_batch_and_ends_the_thread() -> None:
    """A closed scheduler leaves no thread behind (a mock's exit checks exactly that): close
    returns once the batch in progress has finished and the thread has ended."""
    before = set(threading.enumerate())
    sched = SamplingScheduler()
    (thread,) = {t for t in threading.enumerate() if t.name == "localsession-sampler"} - before
    op = submit(sched, StubSession(StubEngine(delay=0.3)), seed=0)
    time.sleep(0.1)  # generating now
    sched.close()
    assert not thread.is_alive()
    assert op.done.wait(0) and op.status == "Completed"


class AdmittingStub(StubEngine):
    """An engine that admits requests (continuous batching): its first batch waits until the
    test has queued more jobs, then calls ``admit`` once; check refuses prompts starting -2."""

    admits_requests = True

    def __init__(self) -> None:
        super().__init__()
        self.running, self.queued = threading.Event(), threading.Event()

    def sample(
        self, weights: str | None, requests: list[SampleRequest], admit: Any = None
    ) -> list[SampleResult]:
        if admit is not None and not self.batches:
            self.running.set()
            assert self.queued.wait(10)

            def check(r: SampleRequest) -> SampleRequest:
                if r.prompt[0] == -2:
                    raise EngineInputError("request 0: token id -2 is outside the vocabulary")
                return r

            requests = requests + admit(check)
        return super().sample(weights, requests)


def test_jobs_queued_during_a_batch_join_it() -> None:
    """Jobs of the same session and weights queued while a batch decodes join it (one engine
    call); a joiner failing the engine's check fails alone; another session's job at the
    head of the queue is not jumped over, and runs next."""
    scheduler = SamplingScheduler(gather_quiet_s=0.0)
    try:
        engine = AdmittingStub()
        session, other = StubSession(engine), StubSession(StubEngine())
        first = submit(scheduler, session, seed=1)
        assert engine.running.wait(10)
        joiners = [
            submit(scheduler, session, seed=2),
            submit(scheduler, session, seed=3, prompt=[-2, 1]),
            submit(scheduler, session, seed=4),
        ]
        behind = [submit(scheduler, other, seed=5), submit(scheduler, session, seed=6)]
        engine.queued.set()
        ops = [first, *joiners, *behind]
        assert all(op.done.wait(10) for op in ops)
        assert engine.batches[0] == (None, [1, 2, 4])  # one call: the first and two joiners
        assert [op.status for op in ops] == [
            "Completed",
            "Completed",
            "Failed",
            "Completed",
            "Completed",
            "Completed",
        ]
        assert "token id -2" in str(joiners[1].error)
        results = [op.result.sequences[0].tokens for op in ops if op.result]
        assert results == [[1], [2], [4], [5], [6]]
        assert engine.batches[1:] == [(None, [6])]  # after the other session's job
    finally:
        scheduler.close()


class LogprobBatchStub(StubEngine):
    """Offers ``compute_logprobs_batch``: records each call's prompts; a batch holding a
    prompt that starts with -1 fails as a whole, as the torch engine's does."""

    def __init__(self) -> None:
        super().__init__()
        self.logprob_calls: list[list[list[int]]] = []

    def compute_logprobs_batch(
        self, weights: str | None, prompts: list[list[int]]
    ) -> list[list[float | None]]:
        self.logprob_calls.append(prompts)
        if any(p[0] == -1 for p in prompts):
            raise EngineInputError("prompt holds token id -1")
        return [[None] + [float(-len(p))] * (len(p) - 1) for p in prompts]

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        return self.compute_logprobs_batch(weights, [tokens])[0]


def submit_logprobs(
    sched: SamplingScheduler, session: Any, prompt: list[int], weights: str | None = None
) -> Operation:
    op = Operation(kind="computeLogprobs", id=str(uuid.uuid4()))
    sched.submit(make_job(session, op, weights, None, prompt))
    return op


def test_concurrent_compute_logprobs_run_as_one_call_where_the_engine_batches() -> None:
    """A burst on the same weights is one ``compute_logprobs_batch`` call, each op with its
    own prompt's result; other weights wait for their own call; a batch that fails reruns
    one call at a time, so only the bad prompt fails."""
    scheduler = SamplingScheduler(gather_quiet_s=0.5, gather_max_s=10.0)
    try:
        engine = LogprobBatchStub()
        session = StubSession(engine)
        prompts = [[1] * n for n in (3, 5, 2)]
        ops = [submit_logprobs(scheduler, session, p) for p in prompts]
        other = submit_logprobs(scheduler, session, [1, 1], weights="pkg")
        assert all(op.done.wait(10) for op in [*ops, other])
        assert engine.logprob_calls == [prompts, [[1, 1]]]
        assert [op.result.logprobs for op in ops if op.result] == [
            [None, -3.0, -3.0],
            [None, -5.0, -5.0, -5.0, -5.0],
            [None, -2.0],
        ]
        engine.logprob_calls.clear()
        mixed = [submit_logprobs(scheduler, session, p) for p in ([1, 1], [-1, 1], [1, 1, 1])]
        assert all(op.done.wait(10) for op in mixed)
        assert [op.status for op in mixed] == ["Completed", "Failed", "Completed"]
        assert engine.logprob_calls[0] == [[1, 1], [-1, 1], [1, 1, 1]]  # together first
        assert len(engine.logprob_calls) == 4  # then one by one
    finally:
        scheduler.close()


def test_compute_logprobs_of_an_engine_without_the_batch_method_run_one_by_one() -> None:
    scheduler = SamplingScheduler(gather_quiet_s=0.5, gather_max_s=10.0)
    try:
        engine = StubEngine()
        session = StubSession(engine)
        started = time.monotonic()
        ops = [submit_logprobs(scheduler, session, [1, 2, 3]) for _ in range(3)]
        assert all(op.done.wait(10) for op in ops)
        assert engine.batches == [(None, [-1])] * 3
        # gathering would wait a 0.5 s quiet period before each of the three: >= 1.5 s
        assert time.monotonic() - started < 1.2
        assert all(op.result == LogprobsResult([None, -1.0, -1.0]) for op in ops)
    finally:
        scheduler.close()
