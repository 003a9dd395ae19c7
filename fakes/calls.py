"""The call log: every training and sampling op a fake was asked for, with assertion helpers.

``fake.calls`` is a :class:`CallLog`, in submission order. Each :class:`Call` records the SDK
method and wire kind, the session, the sequence number, a summary of the arguments (and the
full wire request), how many attempts the submit took (throttles and transient refusals are
retried as the SDK does), and, read live from the runtime, the op's status, error, result
and timings. A request the service refused has status ``"Refused"`` and the error code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from localsession import vocab
from localsession.runtime.sessions.operations import Operation

REFUSED = "Refused"


def summarise(kind: str, body: Any) -> dict[str, Any]:
    """The arguments worth asserting on, from one op's wire body."""
    if not isinstance(body, dict):
        return {}
    if kind in (vocab.OpKind.FORWARD, vocab.OpKind.FORWARD_BACKWARD):
        datums = body.get("datumList") or []
        chunks = [c for d in datums for c in (d.get("modelInput") or {}).get("chunks", [])]
        return {
            "loss_fn": body.get("lossFnName"),
            "datums": len(datums),
            "tokens": sum(len(c.get("tokens", [])) for c in chunks),
            "loss_fn_config": body.get("lossFnConfig"),
        }
    if kind == vocab.OpKind.OPTIMIZER_STEP:
        return {
            vocab.Metric.LEARNING_RATE: (body.get("adamParamsConfig") or {}).get("learningRate")
        }
    if kind in (vocab.OpKind.SAVE_WEIGHTS, vocab.OpKind.SAVE_STATE):
        return {"description": body.get("description"), "merge": bool(body.get("mergeWeights"))}
    if kind == vocab.OpKind.LOAD_STATE:
        return {
            "model_package_arn": body.get("modelPackageArn"),
            "optimizer": body.get("loadOptimizer"),
        }
    if kind in (vocab.OpKind.SAMPLE, vocab.OpKind.COMPUTE_LOGPROBS):
        prompt = [
            t for c in (body.get("prompt") or {}).get("chunks", []) for t in c.get("tokens", [])
        ]
        out: dict[str, Any] = {
            "prompt_tokens": prompt,
            "model_package_arn": body.get("modelPackageArn"),
        }
        if kind == vocab.OpKind.SAMPLE:
            params = body.get("samplingParams") or {}
            out.update(
                num_samples=body.get("numSamples"),
                max_tokens=params.get("maxTokens"),
                temperature=params.get("temperature"),
                seed=params.get("seed"),
            )
        return out
    if kind == vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING:
        return {"model_package_arn": body.get("modelPackageArn")}
    return {}


@dataclass
class Call:
    """One op as the fake saw it. Status, result and timings are read live from the runtime."""

    index: int
    session: str
    kind: str
    seq: int | None
    args: dict[str, Any]
    request: dict[str, Any]
    submitted_at: float = field(default_factory=time.monotonic)
    attempts: int = 0
    operation_id: str | None = None
    error_code: str | None = None
    refusal: str | None = None
    op: Operation | None = field(default=None, repr=False)
    released: bool = False
    #: Identifies a retry of this call's submit (the same session and request).
    retry_key: tuple[str, str] = field(default=("", ""), repr=False)

    @property
    def method(self) -> str:
        """The SDK method that sent it (``forward_backward``, ``optim_step``, ``sample``, ...)."""
        return vocab.METHOD_OF_KIND.get(self.kind, self.kind)

    @property
    def accepted(self) -> bool:
        return self.op is not None

    @property
    def status(self) -> str:
        """``Pending`` / ``InProgress`` / ``Completed`` / ``Failed`` / ``Skipped`` / ``Refused``."""
        return self.op.status if self.op is not None else REFUSED

    @property
    def error(self) -> str | None:
        """The failure message (``errorDetails``), or the refusal's message."""
        return self.op.error if self.op is not None else self.refusal

    @property
    def result(self) -> dict[str, Any] | None:
        """The wire result of a completed op (e.g. ``{"modelPackageArn": ...}``)."""
        return self.op.wire_result() if self.op is not None else None

    @property
    def started_at(self) -> float | None:
        return self.op.started_at if self.op is not None else None

    @property
    def finished_at(self) -> float | None:
        return self.op.finished_at if self.op is not None else None

    @property
    def duration(self) -> float | None:
        """Seconds from submit to a terminal status, or None while it runs."""
        end = self.finished_at
        return None if end is None else end - self.submitted_at

    def __str__(self) -> str:
        seq = f" #{self.seq}" if self.seq is not None else ""
        return f"{self.method}{seq} [{self.status}] {self.session}"


class CallLog:
    """Every call, in submission order; a read-only sequence plus assertion helpers."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._calls: list[Call] = []

    def record(
        self, session: str, kind: str, seq: int | None, body: Any, request: dict[str, Any]
    ) -> Call:
        with self._mutex:
            call = Call(len(self._calls), session, kind, seq, summarise(kind, body), request)
            self._calls.append(call)
            return call

    def __iter__(self) -> Iterator[Call]:
        with self._mutex:
            return iter(list(self._calls))

    def __len__(self) -> int:
        return len(self._calls)

    def __getitem__(self, index: int) -> Call:
        return self._calls[index]

    def clear(self) -> None:
        with self._mutex:
            self._calls.clear()

    def methods(self, session: str | None = None) -> list[str]:
        """The SDK method of each call, in order (optionally of one session)."""
        return [c.method for c in self if session is None or c.session == session]

    def of(self, *methods: str) -> list[Call]:
        """The calls of the given SDK methods (or wire kinds), in order."""
        return [c for c in self if c.method in methods or c.kind in methods]

    # -- assertions ----------------------------------------------------------------------

    def assert_all_succeeded(self) -> None:
        """Every call completed (none refused, failed, skipped or still running)."""
        bad = [f"{c}: {c.error}" for c in self if c.status != vocab.OpStatus.COMPLETED]
        if bad:
            raise AssertionError("calls that did not complete:\n  " + "\n  ".join(bad))

    def assert_optim_step_after_each_forward_backward(self) -> None:
        """In every session, each accepted ``forward_backward`` is followed, later in that
        session's sequence, by an accepted ``optim_step`` (so no gradient is left unapplied)."""
        pending: dict[str, Call] = {}
        for c in self:
            if not c.accepted:
                continue
            if c.kind == vocab.OpKind.FORWARD_BACKWARD:
                pending.setdefault(c.session, c)
            elif c.kind == vocab.OpKind.OPTIMIZER_STEP:
                pending.pop(c.session, None)
        if pending:
            lines = [f"{c} (session {s}) has no optim_step after it" for s, c in pending.items()]
            raise AssertionError("gradients left unapplied:\n  " + "\n  ".join(lines))

    def weights_step(self, call: Call) -> int | None:
        """Optimizer steps behind the weights a sampling call read: steps of the saving
        session before its ``save_weights_for_sampler``; 0 for the base model; None when the
        package was not saved in this log."""
        arn = call.args.get("model_package_arn")
        if not arn:
            loads = [
                c
                for c in self._calls[: call.index]
                if c.session == call.session
                and c.kind == vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING
                and c.status == vocab.OpStatus.COMPLETED
            ]
            arn = loads[-1].args["model_package_arn"] if loads else None
        if not arn:
            return 0
        for save in self._calls[: call.index]:
            if (
                save.kind in (vocab.OpKind.SAVE_WEIGHTS, vocab.OpKind.SAVE_STATE)
                and (save.result or {}).get("modelPackageArn") == arn
            ):
                return self._optim_steps(save.session, save.index)
        return None

    def _optim_steps(self, session: str, before: int) -> int:
        return sum(
            1
            for c in self._calls[:before]
            if c.session == session and c.kind == vocab.OpKind.OPTIMIZER_STEP and c.accepted
        )

    def assert_no_stale_samples(self, max_lag: int = 0) -> None:
        """Each ``sample`` read weights at most ``max_lag`` optimizer steps behind the
        training it was submitted after (counted in the session that saved those weights, or
        the sample's own session for the base model)."""
        stale = []
        for c in self:
            if c.kind != vocab.OpKind.SAMPLE or not c.accepted:
                continue
            step = self.weights_step(c)
            if step is None:
                continue
            owner = c.session
            arn = c.args.get("model_package_arn")
            if arn:
                owner = next(
                    (
                        s.session
                        for s in self._calls
                        if (s.result or {}).get("modelPackageArn") == arn
                    ),
                    owner,
                )
            latest = self._optim_steps(owner, c.index)
            if latest - step > max_lag:
                stale.append(
                    f"{c} read weights from step {step}; {latest} optim_steps had been submitted"
                )
        if stale:
            raise AssertionError("samples used stale weights:\n  " + "\n  ".join(stale))
