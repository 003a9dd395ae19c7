"""``FakeService``: localsession's own ``Service`` with the fake engine, a call log and a clock.

Everything a client observes (futures, sequence order, validation, limits, error codes,
Skipped ops, session states) is the real runtime's. This subclass only adds:

- the fake engine (``engine_factory``) and any base-model name (the fake model is the same
  for all of them, seeded by the name);
- the call log (:mod:`fakes.calls`);
- no backoff sleeps: the client retries a throttled or 5xx-refused submit as the SDK does
  (same sequence number and client token, up to 150 attempts), and the fake's
  :meth:`~FakeService.backoff` returns at once; the call log counts those retries as
  ``attempts`` of one call;
- deterministic sampling: a ``sample`` without a seed gets the next seed of a counter;
- one torch intra-op thread while the fake is open (``torch_threads=1``, restored by
  :meth:`close`): its tensors are tiny, and on a busy CI machine a multi-threaded torch
  region can stall an op for 50-100 ms waiting for a core. ``torch_threads=None`` leaves
  torch's setting alone;
- the manual clock. With ``manual=True`` a training op waits at its engine's gate, and no op
  shows a terminal status to a poll, until :meth:`advance` releases it. ``advance`` releases
  ops one at a time in submission order (for one training client, sequence order), each only
  once it has finished, so futures resolve in order and only when the test says. Sampling
  ops (read-only) compute at once and are only held back from view. Refused submits are not
  held: their futures raise at ``result()`` at once, as on the wire.
"""

from __future__ import annotations

import copy
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fakes.calls import Call, CallLog
from fakes.clock import Gate
from fakes.script import Script
from localsession.futures import DEFAULT_MAX_TRANSIENT_POLL_ERRORS
from localsession.runtime.engine_api import EngineSpec
from localsession.runtime.errors import ServiceError
from localsession.runtime.operations import TERMINAL
from localsession.runtime.service import Service, ServiceConfig

#: Attempts per submit before the SDK gives up on a transient refusal.
SUBMIT_ATTEMPTS = DEFAULT_MAX_TRANSIENT_POLL_ERRORS
#: Real seconds :meth:`FakeService.advance` waits for one op before calling it stuck.
SETTLE_TIMEOUT = 10.0
_RETRYABLE_CODES = frozenset({"ThrottlingException", "InternalServerException"})
_RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def _retryable(exc: ServiceError) -> bool:
    """``sagemaker...is_retryable`` for a service refusal (sagemaker-sdk.md §6.6)."""
    return exc.code in _RETRYABLE_CODES or exc.http_status in _RETRYABLE_STATUSES


def _gate(engine: object) -> Gate | None:
    """A fake engine's clock gate (None for anything else)."""
    gate = getattr(engine, "gate", None)
    return gate if isinstance(gate, Gate) else None


def _kind_of(request: dict[str, Any]) -> tuple[str, Any]:
    config = request.get("operationConfig")
    if isinstance(config, dict) and len(config) == 1:
        kind, body = next(iter(config.items()))
        return str(kind), body
    return "?", None


class FakeService(Service):
    """The runtime with the fake engine, a call log, SDK submit retries and a manual clock."""

    def __init__(
        self,
        *,
        manual: bool = False,
        base_models: list[str] | None = None,
        home: Path | None = None,
        max_sessions: int = 64,
        strict: bool = True,
        torch_threads: int | None = 1,
    ) -> None:
        self._tmp = None if home is not None else tempfile.TemporaryDirectory(prefix="fakes-")
        self.script = Script()
        self.calls = CallLog()
        self._base_models = base_models
        self._manual = manual
        self._clock = threading.Condition()
        self._seed = 0
        self._by_operation: dict[str, Call] = {}
        self._held: dict[str, list[Any]] = {}  # completion callbacks waiting for a release
        self._retrying: dict[tuple[str, str], Call] = {}
        from fakes.engine import EngineKnobs  # torch: imported with the first fake service

        self.knobs = EngineKnobs()
        self._restore_threads: int | None = None
        if torch_threads is not None:
            import torch

            self._restore_threads = torch.get_num_threads()
            torch.set_num_threads(torch_threads)
        config = ServiceConfig(
            max_sessions=max_sessions,
            strict=strict,
            gap_timeout=0.0,  # as the in-process default: a refused number is lost at once
            home=home if home is not None else Path(self._tmp.name),  # type: ignore[union-attr]
            engine_factory=self._make_engine,
        )
        super().__init__(config)
        # The fake engine is instant: no gathering window before a sampling batch is taken.
        self._scheduler.gather_quiet_s = 0.0

    # -- engine and models ---------------------------------------------------------------

    def _make_engine(self, spec: EngineSpec) -> Any:
        from fakes.engine import FakeEngine

        return FakeEngine(spec, script=self.script, knobs=self.knobs, manual=self._manual)

    def list_base_models(self) -> list[str]:
        return list(self._base_models) if self._base_models is not None else ["fakes/bigram"]

    def resolve_base_model(self, name: str) -> None:
        if self._base_models is not None and name not in self._base_models:
            raise ValueError(
                f"unknown base model {name!r} in this fake; it knows "
                f"{', '.join(self._base_models)} (FakeServiceClient(base_models=None) accepts "
                "any name)"
            )
        if not name:
            raise ValueError("base_model must be a non-empty model name")

    def engine(self, session: str) -> Any:
        """The ``FakeEngine`` of a running session (for tests that inspect the model)."""
        engine = self._session(session, runtime=True).engine
        if engine is None:
            raise RuntimeError(
                f"session {session} has no engine ({self._session(session, runtime=True).status})"
            )
        return engine

    # -- runtime calls: logged, retried as the SDK does ---------------------------------

    def backoff(self, seconds: float) -> None:
        """A client's wait before retrying a refused submit: none, in the fakes."""

    def _record(self, name: str, kind: str, seq: int | None, body: Any, request: Any) -> Call:
        """The call a request belongs to: a retry of a refused submit (same session, same
        request, hence same sequence number and token) continues that call."""
        key = (name, json.dumps(request, sort_keys=True, default=str))
        retried = self._retrying.pop(key, None)
        if retried is not None:
            return retried
        call = self.calls.record(name, kind, seq, body, request)
        call.retry_key = key
        return call

    def _submit(self, call: Call, send: Any) -> dict[str, Any]:
        call.attempts += 1
        try:
            response: dict[str, Any] = send()
        except ServiceError as exc:
            call.error_code, call.refusal = exc.code, exc.message
            if _retryable(exc) and call.attempts < SUBMIT_ATTEMPTS:
                self._retrying[call.retry_key] = call  # the client sends it again
            raise
        call.error_code = call.refusal = None
        call.operation_id = response["operationId"]
        call.op = self._operation(call.session, call.operation_id)
        self._by_operation[call.operation_id] = call
        return response

    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        kind, body = _kind_of(request)
        seq = request.get("sequenceNumber")
        call = self._record(name, kind, seq if isinstance(seq, int) else None, body, request)
        return self._submit(
            call, lambda: super(FakeService, self).execute_training_operation(name, request)
        )

    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        kind, body = _kind_of(request)
        if (
            kind == "sample"
            and isinstance(body, dict)
            and isinstance(body.get("samplingParams"), dict)
        ):
            if body["samplingParams"].get("seed") is None:
                request = copy.deepcopy(request)
                with self._clock:
                    self._seed += 1
                    request["operationConfig"]["sample"]["samplingParams"]["seed"] = self._seed
                body = request["operationConfig"]["sample"]
        call = self._record(name, kind, None, body, request)
        return self._submit(
            call, lambda: super(FakeService, self).execute_sampling_operation(name, request)
        )

    # -- the manual clock ----------------------------------------------------------------

    @property
    def manual(self) -> bool:
        return self._manual

    def set_manual(self, manual: bool) -> None:
        """Switch clock modes; leaving manual mode lets everything held run and show."""
        with self._clock:
            self._manual = manual
            self._clock.notify_all()
        if not manual:
            self._release_callbacks(list(self._held))
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            gate = _gate(session.engine)
            if gate is not None:
                gate.set_manual(manual)

    def _visible(self, operation_id: str) -> bool:
        if not self._manual:
            return True
        call = self._by_operation.get(operation_id)
        return call is None or call.released

    def get_training_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        response = super().get_training_operation_result(name, operation_id)
        return response if self._visible(operation_id) else {"status": "Pending"}

    def get_sampling_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        response = super().get_sampling_operation_result(name, operation_id)
        return response if self._visible(operation_id) else {"status": "Pending"}

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool:
        if not self._manual:
            return super().wait_operation(name, operation_id, timeout)
        self._operation(name, operation_id)  # unknown ids raise as usual
        with self._clock:
            return self._clock.wait_for(lambda: self._visible(operation_id), timeout)

    def on_operation_done(self, name: str, operation_id: str, callback: Any) -> None:
        """Completion callbacks fire when the manual clock releases the op, not before."""
        self._operation(name, operation_id)  # unknown ids raise as usual
        with self._clock:
            if not self._visible(operation_id):
                self._held.setdefault(operation_id, []).append((name, callback))
                return
        super().on_operation_done(name, operation_id, callback)

    def _release_callbacks(self, operation_ids: list[str]) -> None:
        with self._clock:
            held = [(op_id, *pair) for op_id in operation_ids for pair in self._held.pop(op_id, [])]
        for op_id, name, callback in held:
            super().on_operation_done(name, op_id, callback)

    def _settle(self, call: Call) -> None:
        """Let ``call``'s op run (through its engine's gate) and wait until it is terminal."""
        op = call.op
        assert op is not None
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while op.status not in TERMINAL:
            session = self._sessions.get(call.session)
            gate = _gate(session.engine if session is not None else None)
            if call.seq is not None and gate is not None and gate.waiting:
                gate.grant()  # the worker runs ops in order: the waiting call is this op
                op.done.wait(SETTLE_TIMEOUT)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{call} did not finish within {SETTLE_TIMEOUT:.0f}s")
            op.done.wait(0.0005)
        if op.status not in TERMINAL:
            raise RuntimeError(f"{call} did not finish within {SETTLE_TIMEOUT:.0f}s")

    def advance(self, n: int = 1) -> list[Call]:
        """Release the next ``n`` ops in submission order; returns the calls released."""
        if not self._manual:
            raise RuntimeError("advance() needs the manual clock: FakeServiceClient(manual=True)")
        released: list[Call] = []
        for _ in range(n):
            call = next((c for c in self.calls if c.accepted and not c.released), None)
            if call is None:
                break
            self._settle(call)
            with self._clock:
                call.released = True
                self._clock.notify_all()
            if call.operation_id is not None:
                self._release_callbacks([call.operation_id])
            released.append(call)
        return released

    def run_until_idle(self) -> list[Call]:
        """Release every op submitted so far (and any submitted meanwhile)."""
        released: list[Call] = []
        while step := self.advance(1):
            released += step
        return released

    def close(self) -> None:
        self.set_manual(False)
        super().close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        if self._restore_threads is not None:
            import torch

            torch.set_num_threads(self._restore_threads)
            self._restore_threads = None
