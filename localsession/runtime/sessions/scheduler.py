"""The sampling scheduler: batches concurrent sampling requests into one engine call.

Requests queue up while the engine is busy; when it frees up, the scheduler takes everything
waiting, groups it by (session, weights), and runs each group as one batch: every stream
(request × ``num_samples``) of the group shares the same batched, KV-cached decode steps
(docs/semantics.md#3, "Batching"). So 32 concurrent ``sample`` calls become one batched
generation instead of 32 sequential ones. Concurrent ``compute_logprobs`` calls on the same
weights are likewise gathered and run as one engine call, where the engine offers
``compute_logprobs_batch`` (port); otherwise each runs alone, with no gathering wait.

- **Gathering:** concurrent ``sample`` calls arrive a few hundred microseconds apart, so after
  the first job the scheduler waits until the queue has been quiet for ``GATHER_QUIET_S``
  (never longer than ``GATHER_MAX_S`` in all) before it takes a batch. A lone request pays
  that quiet period (milliseconds) and nothing else.
- **Isolation:** each stream keeps its own seeded generator, so batching never changes a
  request's tokens. A batch that fails is re-run one request at a time, so a bad request
  fails alone and never takes its batch-mates down with it.
- **Joining:** a burst split by the window (a preempted submitter on a loaded machine) is
  not split into sequential batches: an engine that admits requests (``admits_requests``,
  port.Admit) takes jobs queued for the same session and weights into the running
  batch between decode steps (continuous batching), each with its own prefill.
- **Mixing adapters:** where the engines can (``mixes_weights``, port.MixedAdmit), sample
  jobs for different weights (checkpoints, the base) form one batch, each row decoding with
  its own adapter (``engine/multi_lora.py``): one session's jobs, and jobs of sessions whose
  engines report the same ``mix_key`` (one shared base, one adapter layout; e.g. Tinker's
  sampling clients of one base). The first job's engine runs the batch; each job's usage
  and log line go to its own session. A batch that starts mixed admits mixable jobs of any
  weights; a batch of one session and weights runs, and admits, as before.
- **One thread:** every generation runs on the scheduler's single thread, one batch at a
  time (parallel generation threads measured 2× slower than sequential on CPU). Sampling
  never waits on a session's training queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from localsession import cpu_threads, vocab
from localsession.port import Admit, EngineInputError, MixedAdmit, SampleRequest
from localsession.port_results import LogprobsResult
from localsession.runtime import errors
from localsession.runtime.events import op_summary
from localsession.runtime.sessions.lifecycle import Session
from localsession.runtime.sessions.operations import Operation

logger = logging.getLogger(__name__)

#: Most sequences (requests × num_samples) decoded together in one batch.
MAX_BATCH_SEQUENCES = 256
#: A batch is taken once no new job has arrived for this long (seconds)...
GATHER_QUIET_S = 0.005
#: ...or once this long has passed since the scheduler woke for the first job.
GATHER_MAX_S = 0.05


@dataclass
class _Job:
    session: Session
    op: Operation
    weights: str | None
    request: SampleRequest | None  # None for computeLogprobs
    tokens: list[int]


class SamplingScheduler:
    """One thread that drains queued sampling jobs in batches."""

    def __init__(
        self, *, gather_quiet_s: float = GATHER_QUIET_S, gather_max_s: float = GATHER_MAX_S
    ) -> None:
        #: Gathering window (module docstring); 0 takes whatever is queued at once.
        self.gather_quiet_s, self.gather_max_s = gather_quiet_s, gather_max_s
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._closing = False
        self._began = 0.0
        self._thread = threading.Thread(target=self._run, name="localsession-sampler", daemon=True)
        self._thread.start()

    def submit(self, job: _Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking work and wait (up to ``timeout`` s) for the thread to finish its
        current batch and end, so a closed service (or a mock's exit) leaves no thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _take_batch(self) -> list[_Job] | None:
        """Wait for work; take the oldest job and every queued job batchable with it."""
        with self._cond:
            while not self._jobs and not self._closing:
                cpu_threads.release()  # no OpenMP threads held while waiting (cpu_threads.py)
                self._cond.wait()
            if self._closing:
                return None
            head = self._jobs[0]
            logprobs = head.request is None
            if logprobs and not _batches_logprobs(head):
                return [self._jobs.popleft()]
            self._gather()
            if self._closing:
                return None
            first = self._jobs.popleft()
            batch = [first]
            budget = MAX_BATCH_SEQUENCES - _sequences(first)
            keep: deque[_Job] = deque()
            while self._jobs:
                job = self._jobs.popleft()
                same = job.session is first.session and job.weights == first.weights
                same = same or (not logprobs and _mixable(job, first))
                if same and (job.request is None) == logprobs and _sequences(job) <= budget:
                    batch.append(job)
                    budget -= _sequences(job)
                else:
                    keep.append(job)
            self._jobs = keep
            return batch

    def _gather(self) -> None:
        """Let a burst of concurrent submits land (the caller holds ``_cond``)."""
        deadline = time.monotonic() + self.gather_max_s
        seen = len(self._jobs)
        while not self._closing and self.gather_quiet_s > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(min(self.gather_quiet_s, remaining))
            if len(self._jobs) == seen:
                return  # quiet for a whole period (or only woken without new work)
            seen = len(self._jobs)

    def _run(self) -> None:
        while (batch := self._take_batch()) is not None:
            self._began = time.time()  # the batch's start, as its events log it
            live = [job for job in batch if self._start(job)]
            if live:
                try:
                    self._execute(live)
                except Exception as exc:  # noqa: BLE001 - the thread serves every session
                    # the batch's own failure handling failed (out of memory while logging
                    # its error ended this thread once, and every later sample waited): its
                    # unfinished ops fail, and the next batch runs
                    for job in live:  # the batch grows as jobs join it: all of them here
                        job.op.finish(
                            vocab.OpStatus.FAILED, error=f"sampling failed: {type(exc).__name__}"
                        )

    @staticmethod
    def _start(job: _Job) -> bool:
        if job.session.engine is None or job.session.status not in (
            vocab.SessionStatus.RUNNING,
            vocab.SessionStatus.BLOCKED,
        ):
            job.op.finish(
                vocab.OpStatus.FAILED, error=f"The session is {job.session.status}; nothing ran."
            )
            return False
        job.op.start()
        return True

    def _execute(self, batch: list[_Job]) -> None:
        """Run a batch (jobs queued meanwhile may join it); if it fails as a whole, run its
        requests one by one (isolation)."""
        if not self._run_batch(batch, isolate=True):
            for job in list(batch):
                self._run_batch([job], isolate=False)

    def _admitter(self, batch: list[_Job]) -> Admit:
        """The ``admit`` callback of a running sample batch (port.Admit): it takes the
        jobs at the head of the queue that are batchable with ``batch`` (same session and
        weights, within ``MAX_BATCH_SEQUENCES``), appends them to ``batch`` and hands the
        engine their checked requests. A job failing the check finishes Failed alone. Only
        the head is taken, so admission never jumps past other sessions' work."""
        admit_pairs = self._mixed_admitter(batch, mixed=False)

        def admit(check: Callable[[SampleRequest], SampleRequest]) -> list[SampleRequest]:
            return [request for _, request in admit_pairs(lambda _w, r: check(r))]

        return admit

    def _mixed_admitter(self, batch: list[_Job], *, mixed: bool = True) -> MixedAdmit:
        """``_admitter`` for a batch that mixes weights (port.MixedAdmit): the head jobs
        mixable with it, whatever their weights and session (``mixed``; else the same session
        and weights only)."""
        first = batch[0]

        def admit(
            check: Callable[[str | None, SampleRequest], SampleRequest],
        ) -> list[tuple[str | None, SampleRequest]]:
            taken: list[_Job] = []
            with self._cond:
                if self._closing:
                    return []
                budget = MAX_BATCH_SEQUENCES - sum(
                    j.request.num_samples for j in batch if j.request is not None
                )
                while self._jobs:
                    job = self._jobs[0]
                    same = job.session is first.session and job.weights == first.weights
                    if not (
                        (same or (mixed and _mixable(job, first)))
                        and job.request is not None
                        and job.request.num_samples <= budget
                    ):
                        break
                    taken.append(self._jobs.popleft())
                    budget -= job.request.num_samples
            admitted: list[tuple[str | None, SampleRequest]] = []
            for job in taken:
                if not self._start(job):
                    continue
                assert job.request is not None
                try:
                    request = check(job.weights, job.request)
                except EngineInputError as exc:
                    details = errors.op_error_details(exc, "sampling", (EngineInputError,))
                    job.op.finish(vocab.OpStatus.FAILED, error=details)
                    continue
                batch.append(job)
                admitted.append((job.weights, request))
            return admitted

        return admit

    def _run_batch(self, batch: list[_Job], *, isolate: bool) -> bool:
        """Run one batch, finish its ops and log it (runtime/events.py). With ``isolate``
        the batch may grow (engines that admit requests), and a failure of a batch of several
        jobs finishes nothing and returns False, for the caller to run them one by one."""
        # a re-run alone (isolate=False) starts now; a batch when its jobs were started
        started = self._began if isolate else time.time()
        ran = self._run_batch_ops(batch, isolate=isolate)
        for session in dict.fromkeys(job.session for job in batch) if ran else ():
            log = getattr(session, "events", None)  # (a test's stub session has none)
            if log is not None:  # each session logs its own jobs of a mixed batch
                mine = [job for job in batch if job.session is session]
                tokens = sum(op_summary(job.op.result)[1] for job in mine)
                log.batch(session.name, batch[0].op.kind, started, [j.op.id for j in mine], tokens)
        return ran

    def _run_batch_ops(self, batch: list[_Job], *, isolate: bool) -> bool:
        session = batch[0].session
        engine = session.engine
        assert engine is not None
        try:
            if batch[0].request is None:
                run_many = getattr(engine, "compute_logprobs_batch", None)
                if run_many is None or len(batch) == 1:  # several come only with the method
                    results = [engine.compute_logprobs(job.weights, job.tokens) for job in batch]
                else:
                    results = run_many(batch[0].weights, [job.tokens for job in batch])
                for job, logprobs in zip(batch, results, strict=True):
                    session.add_sample_usage(len(job.tokens), 0)
                    job.op.finish(vocab.OpStatus.COMPLETED, result=LogprobsResult(logprobs))
                return True
            requests = [job.request for job in batch if job.request is not None]
            mixed = {(id(job.session), job.weights) for job in batch}
            if len(mixed) > 1:  # several weights or sessions: _take_batch's _mixable
                responses = engine.sample_mixed(  # type: ignore[attr-defined]
                    [(job.weights, job.request) for job in batch],
                    admit=self._mixed_admitter(batch) if isolate else None,
                )
            elif isolate and getattr(engine, "admits_requests", False):
                responses = engine.sample(  # type: ignore[call-arg]
                    batch[0].weights, requests, admit=self._admitter(batch)
                )
            else:
                responses = engine.sample(batch[0].weights, requests)
        except Exception as exc:  # noqa: BLE001 - one bad batch must not kill the scheduler
            if isolate and len(batch) > 1:
                return False
            if not isinstance(exc, EngineInputError):
                logger.exception("sampling batch of %d requests crashed", len(batch))
            details = errors.op_error_details(exc, "sampling", (EngineInputError,))
            for job in batch:
                job.op.finish(vocab.OpStatus.FAILED, error=details)
            return True
        for job, response in zip(batch, responses, strict=True):
            decoded = sum(len(s.tokens) for s in response.sequences)
            prefill = len(job.tokens) * len(response.sequences)
            job.session.add_sample_usage(prefill, decoded)
            job.op.finish(
                vocab.OpStatus.COMPLETED, result=replace(response, prompt_tokens=len(job.tokens))
            )
        return True


def _sequences(job: _Job) -> int:
    """The rows a job adds to a batch: its samples, or one prompt (``compute_logprobs``)."""
    return 1 if job.request is None else job.request.num_samples


def _mixable(job: _Job, first: _Job) -> bool:
    """Whether sample ``job`` may join a batch led by ``first`` whatever its weights: both
    engines mix weights (port.MixedAdmit), and they are one session's, or their engines
    report the same ``mix_key`` (one shared base and adapter layout: TorchEngine's)."""
    mine, lead = job.session.engine, first.session.engine
    if not (getattr(mine, "mixes_weights", False) and getattr(lead, "mixes_weights", False)):
        return False
    if job.session is first.session:
        return True
    key = getattr(lead, "mix_key", None)
    return key is not None and key == getattr(mine, "mix_key", None)


def _batches_logprobs(job: _Job) -> bool:
    """Whether ``job``'s engine runs several ``compute_logprobs`` calls as one (port)."""
    return hasattr(job.session.engine, "compute_logprobs_batch")


def make_job(
    session: Session,
    op: Operation,
    weights: str | None,
    request: SampleRequest | None,
    tokens: list[int],
) -> _Job:
    return _Job(session=session, op=op, weights=weights, request=request, tokens=tokens)
