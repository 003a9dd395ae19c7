"""The sampling scheduler with an engine that mixes weights in one batch (``mixes_weights``,
port.MixedAdmit): one session's jobs for different weights become one ``sample_mixed``
call, each result going back to its own job; a batch of one weights runs through
``sample`` as before; a mixed batch admits jobs of any weights of its session."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from localsession.port import EngineInputError, SampleRequest
from localsession.port_results import SampledSequence, SampleResult
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.scheduler import SamplingScheduler, make_job


class StubSession:
    status = "Running"

    def __init__(self, engine: MixingStub) -> None:
        self.engine = engine

    def add_sample_usage(self, prefill: int, decode: int) -> None:
        pass


def submit(
    sched: SamplingScheduler,
    session: StubSession,
    seed: int,
    weights: str | None = None,
    prompt: list[int] | None = None,
) -> Operation:
    op = Operation(kind="sample", id=str(uuid.uuid4()))
    request = SampleRequest(prompt=prompt or [1, 2], num_samples=2, seed=seed)
    sched.submit(make_job(session, op, weights, request, request.prompt))  # type: ignore[arg-type]
    return op


def _result(weights: str | None, request: SampleRequest) -> SampleResult:
    """A result that says which weights and request produced it."""
    token = request.seed * 10 + (0 if weights is None else int(weights[-1]))
    return SampleResult([SampledSequence([token], [-1.0], "length")] * request.num_samples)


class MixingStub:
    """Records each ``sample`` call's (weights, seeds) and each ``sample_mixed`` call's
    (weights, seed) pairs. The first mixed call waits (``queued``) before calling ``admit``
    once, so jobs can queue behind it."""

    mixes_weights = True
    admits_requests = True

    def __init__(self) -> None:
        self.batches: list[tuple[str | None, list[int]]] = []
        self.mixed: list[list[tuple[str | None, int]]] = []
        self.running, self.queued = threading.Event(), threading.Event()

    def sample(
        self, weights: str | None, requests: list[SampleRequest], admit: object = None
    ) -> list[SampleResult]:
        self.batches.append((weights, [r.seed for r in requests]))
        return [_result(weights, r) for r in requests]

    def sample_mixed(
        self,
        items: list[tuple[str | None, SampleRequest]],
        admit: Callable[..., list[tuple[str | None, SampleRequest]]] | None = None,
    ) -> list[SampleResult]:
        self.running.set()
        if admit is not None and not self.mixed:
            assert self.queued.wait(10)

            def check(weights: str | None, request: SampleRequest) -> SampleRequest:
                if request.prompt[0] == -2:
                    raise EngineInputError("prompt holds token id -2")
                return request

            items = items + admit(check)
        self.mixed.append([(w, r.seed) for w, r in items])
        return [_result(w, r) for w, r in items]


def test_one_sessions_jobs_on_several_weights_are_one_mixed_batch() -> None:
    scheduler = SamplingScheduler(gather_quiet_s=0.0)
    try:
        engine = MixingStub()
        session = StubSession(engine)
        engine.queued.set()  # nothing to wait for: admit finds an empty queue
        with scheduler._cond:  # queue them together, so they form one batch
            ops = [
                submit(scheduler, session, seed=1, weights="/p/1"),
                submit(scheduler, session, seed=2, weights=None),
                submit(scheduler, session, seed=3, weights="/p/2"),
                submit(scheduler, session, seed=4, weights="/p/1"),
            ]
        assert all(op.done.wait(10) for op in ops)
        assert engine.mixed == [[("/p/1", 1), (None, 2), ("/p/2", 3), ("/p/1", 4)]]
        assert engine.batches == []  # ``sample`` never ran
        tokens = [op.result.sequences[0].tokens for op in ops if op.result]
        assert tokens == [[11], [20], [32], [41]]
    finally:
        scheduler.close()


def test_a_batch_of_one_weights_still_runs_through_sample() -> None:
    scheduler = SamplingScheduler(gather_quiet_s=0.0)
    try:
        engine = MixingStub()
        session = StubSession(engine)
        with scheduler._cond:
            ops = [submit(scheduler, session, seed=s, weights="/p/1") for s in (1, 2)]
        assert all(op.done.wait(10) for op in ops)
        assert engine.mixed == [] and engine.batches == [("/p/1", [1, 2])]
    finally:
        scheduler.close()


def test_a_mixed_batch_admits_its_sessions_jobs_of_any_weights() -> None:
    """Queued behind a running mixed batch: two jobs of its session on other weights join
    it (one failing the engine's check, alone); another session's job at the head of the
    queue is not jumped over."""
    scheduler = SamplingScheduler(gather_quiet_s=0.0)
    try:
        engine, other_engine = MixingStub(), MixingStub()
        session, other = StubSession(engine), StubSession(other_engine)
        other_engine.queued.set()
        with scheduler._cond:
            first = [
                submit(scheduler, session, seed=1, weights="/p/1"),
                submit(scheduler, session, seed=2, weights=None),
            ]
        assert engine.running.wait(10)
        joiners = [
            submit(scheduler, session, seed=3, weights="/p/3"),
            submit(scheduler, session, seed=4, weights="/p/1", prompt=[-2, 1]),
            submit(scheduler, session, seed=5, weights=None),
        ]
        behind = [submit(scheduler, other, seed=6), submit(scheduler, session, seed=7)]
        engine.queued.set()
        ops = [*first, *joiners, *behind]
        assert all(op.done.wait(10) for op in ops)
        assert engine.mixed[0] == [("/p/1", 1), (None, 2), ("/p/3", 3), (None, 5)]
        assert [op.status for op in ops] == ["Completed"] * 3 + ["Failed"] + ["Completed"] * 3
        assert "token id -2" in str(joiners[1].error)
        tokens = [op.result.sequences[0].tokens for op in ops if op.result]
        assert tokens == [[11], [20], [33], [50], [60], [70]]
    finally:
        scheduler.close()


class KeyedStub(MixingStub):
    """A mixing engine that reports ``mix_key`` (TorchEngine: one shared base and layout)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.mix_key = key
        self.queued.set()


class CountingSession(StubSession):
    def __init__(self, engine: MixingStub) -> None:
        super().__init__(engine)
        self.usage: list[tuple[int, int]] = []

    def add_sample_usage(self, prefill: int, decode: int) -> None:
        self.usage.append((prefill, decode))


def test_sessions_whose_engines_share_a_mix_key_are_one_batch() -> None:
    """Two sessions on one base (equal ``mix_key``) sample in one call on the first job's
    engine, each job's usage counted to its own session; a session with another key runs
    in a batch of its own."""
    scheduler = SamplingScheduler(gather_quiet_s=0.0)
    try:
        lead, peer, apart = KeyedStub("base-a"), KeyedStub("base-a"), KeyedStub("base-b")
        sessions = [CountingSession(e) for e in (lead, peer, apart)]
        with scheduler._cond:
            ops = [
                submit(scheduler, sessions[0], seed=1, weights="/p/1"),
                submit(scheduler, sessions[2], seed=2, weights="/p/2"),
                submit(scheduler, sessions[1], seed=3, weights="/p/3"),
                submit(scheduler, sessions[1], seed=4, weights=None),
            ]
        assert all(op.done.wait(10) for op in ops)
        assert lead.mixed == [[("/p/1", 1), ("/p/3", 3), (None, 4)]]
        assert peer.mixed == [] and peer.batches == []
        assert apart.batches == [("/p/2", [2])]
        tokens = [op.result.sequences[0].tokens for op in ops if op.result]
        assert tokens == [[11], [22], [33], [40]]
        # prompt [1, 2] x 2 samples, one token each
        assert [len(s.usage) for s in sessions] == [1, 2, 1]
        assert sessions[1].usage == [(4, 2), (4, 2)]
    finally:
        scheduler.close()
