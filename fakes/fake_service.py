"""``FakeService``: a ``Backend`` that composes localsession's own ``Service`` with a fake engine.

Everything a client observes (futures, sequence order, validation, limits, error codes,
Skipped ops, session states) is the real runtime's: ``FakeService.runtime`` is a plain
:class:`~localsession.runtime.service.Service`, built by the composition root
(the wiring's ``fake_service`` profile, as every service is built by a profile) with

- a fake engine factory: the light engine (:mod:`fakes.light`, pure Python, the default) or,
  with ``numerics=True``, the bigram engine on torch (:mod:`fakes.engine`);
- a hermetic model catalog (``StaticCatalog``): any name, or only ``base_models``; it
  never reads ``~/.localsession/models.json`` nor scans the Hugging Face cache;
- no sampling gather window (``gather_quiet_s=0``): the fake engines are instant;
- an observer that feeds the call log (:mod:`fakes.calls`).

Around it, this class adds what a test double needs and the service does not do:

- no backoff sleeps: the client retries a throttled or 5xx-refused submit as the SDK does
  (same sequence number and client token, up to 150 attempts) and :meth:`backoff` returns at
  once; the call log counts those retries as ``attempts`` of one call;
- deterministic sampling: a ``sample`` without a seed gets the next seed of a counter;
- with ``numerics=True``, one torch intra-op thread while the fake is open
  (``torch_threads=1``, restored by :meth:`close`): its tensors are tiny, and on a busy CI
  machine a multi-threaded torch region can stall an op waiting for a core;
- the manual clock. With ``manual=True`` a training op waits at its engine's gate, and no op
  shows a terminal status to a poll, until :meth:`advance` releases it, one at a time in
  submission order, each only once it has finished. Sampling ops compute at once and are only
  held back from view. Refused submits are not held: their futures raise at once.
"""

from __future__ import annotations

import copy
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakes.calls import Call, CallLog
from fakes.clock import Gate
from fakes.knobs import EngineKnobs
from fakes.script import Script
from localsession import vocab, wiring
from localsession.port import EngineSpec
from localsession.runtime.errors import ServiceError
from localsession.runtime.faults import Faults
from localsession.runtime.models.catalog import ModelCatalog

#: Real seconds :meth:`FakeService.advance` waits for one op before calling it stuck.
SETTLE_TIMEOUT = 10.0
DEFAULT_MODEL = "fakes/bigram"


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


class FakeService:
    """The runtime with a fake engine, a call log, SDK submit retries and a manual clock."""

    def __init__(
        self,
        *,
        manual: bool = False,
        base_models: list[str] | None = None,
        home: Path | None = None,
        max_sessions: int | None = None,
        strict: bool = True,
        numerics: bool = False,
        torch_threads: int | None = 1,
        engine_factory: Callable[..., Any] | None = None,
        catalog: ModelCatalog | None = None,
        region: str | None = None,
        hub_cache: Path | None = None,
    ) -> None:
        """``engine_factory(spec, *, script, knobs, manual)`` replaces the fake engine class
        (the conformance self-check plants defects this way). ``catalog`` replaces the
        hermetic default built from ``base_models`` (``localsession.mock`` lists its map).
        ``region`` and ``hub_cache``: the service's (``localsession.mock`` passes its own)."""
        self._tmp = None if home is not None else tempfile.TemporaryDirectory(prefix="fakes-")
        self.script = Script()
        self.calls = CallLog()
        self.knobs = EngineKnobs()
        self.numerics = numerics
        self._manual = manual
        self._clock = threading.Condition()
        self._seed = 0
        self._by_operation: dict[str, Call] = {}
        self._held: dict[str, list[Any]] = {}  # completion callbacks waiting for a release
        self._retrying: dict[tuple[str, str], Call] = {}
        self._engine_class = engine_factory or self._default_engine_class()
        self._restore_threads: int | None = None
        if numerics and torch_threads is not None:
            import torch

            self._restore_threads = torch.get_num_threads()
            torch.set_num_threads(torch_threads)
        if catalog is None:
            catalog = wiring.listed_catalog(
                base_models or [DEFAULT_MODEL],
                accept_any=base_models is None,
                write_tokenizers=False,
            )
        self.runtime = wiring.fake_service(
            self._make_engine,
            catalog,
            home=home if home is not None else Path(self._tmp.name),  # type: ignore[union-attr]
            strict=strict,
            max_sessions=max_sessions,
            region=region,
            hub_cache=hub_cache,
            # The light fakes' requests come from their own client: skip loading botocore's
            # sagemaker model; the numeric fake (conformance) checks as the service does.
            check_create_members=numerics,
        )
        self.runtime.add_observer(self._observe)

    def _default_engine_class(self) -> Callable[..., Any]:
        if self.numerics:
            from fakes.engine import FakeEngine  # torch: imported with the first numeric fake

            return FakeEngine
        from fakes.light import LightEngine

        return LightEngine

    def _make_engine(self, spec: EngineSpec) -> Any:
        return self._engine_class(spec, script=self.script, knobs=self.knobs, manual=self._manual)

    @property
    def faults(self) -> Faults:
        """The runtime's injected faults (:class:`~localsession.runtime.faults.Faults`)."""
        return self.runtime.faults

    def engine(self, session: str) -> Any:
        """The fake engine of a running session (for tests that inspect the model)."""
        found = self.runtime.session(session)
        if found.engine is None:
            raise RuntimeError(f"session {session} has no engine ({found.status})")
        return found.engine

    def expire_session(self, name: str) -> None:
        self.runtime.expire_session(name)

    # -- the Backend operations: the runtime's, some logged or held ----------------------

    def create_training_session(
        self,
        request: dict[str, Any],
        *,
        strict: bool | None = None,
        region: str | None = None,
    ) -> dict[str, Any]:
        return self.runtime.create_training_session(request, strict=strict, region=region)

    def describe_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.describe_training_session(request)

    def list_training_sessions(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.list_training_sessions(request)

    def stop_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.stop_training_session(request)

    def delete_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.delete_training_session(request)

    def list_model_packages(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.list_model_packages(request)

    def describe_model_package(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.describe_model_package(request)

    def delete_model_package(
        self, request: dict[str, Any], *, delete_artifacts: bool = False
    ) -> dict[str, Any]:
        return self.runtime.delete_model_package(request, delete_artifacts=delete_artifacts)

    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.runtime.execute_training_operation(name, request)

    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        kind, body = _kind_of(request)
        params = body.get("samplingParams") if isinstance(body, dict) else None
        if kind == vocab.OpKind.SAMPLE and isinstance(params, dict) and params.get("seed") is None:
            request = copy.deepcopy(request)
            with self._clock:
                self._seed += 1
                request["operationConfig"][vocab.OpKind.SAMPLE]["samplingParams"]["seed"] = (
                    self._seed
                )
        return self.runtime.execute_sampling_operation(name, request)

    def get_training_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        response = self.runtime.get_training_operation_result(name, operation_id)
        return response if self._visible(operation_id) else {"status": vocab.OpStatus.PENDING}

    def get_sampling_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        response = self.runtime.get_sampling_operation_result(name, operation_id)
        return response if self._visible(operation_id) else {"status": vocab.OpStatus.PENDING}

    # -- the in-process extension (client/backend.py): waits and callbacks follow the clock --

    @property
    def in_process(self) -> FakeService:
        """The calls only an in-process backend has; the fake's own, clock-aware ones."""
        return self

    def wait_for_session(self, name: str, timeout: float | None = None) -> str:
        return self.runtime.wait_for_session(name, timeout)

    def list_base_models(self) -> list[str]:
        return self.runtime.list_base_models()

    def resolve_base_model(self, name: str) -> None:
        self.runtime.resolve_base_model(name)

    def get_tokenizer(self, name: str) -> Any:
        return self.runtime.get_tokenizer(name)

    def backoff(self, seconds: float) -> None:
        """A client's wait before retrying a refused submit: none, in the fakes."""

    def run_here(self, name: str, operation_id: str) -> bool:
        """Nothing (False): in the fakes every op runs on its session's worker, where the
        clock's gate holds it."""
        return False  # nothing ran here

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool:
        if not self._manual:
            return self.runtime.wait_operation(name, operation_id, timeout)
        self.runtime.operation(name, operation_id)  # unknown ids raise as usual
        with self._clock:
            return self._clock.wait_for(lambda: self._visible(operation_id), timeout)

    def __getattr__(self, name: str) -> Any:
        """Every other service operation (registry, Hub, chat, ...) is the runtime's."""
        if name.startswith("_") or name == "runtime":
            raise AttributeError(name)
        return getattr(self.runtime, name)

    # -- the call log (fed by the runtime's observer hook) --------------------------------

    def _observe(
        self, name: str, request: dict[str, Any], outcome: dict[str, Any] | ServiceError
    ) -> None:
        """Log one submit. A retry of a refused submit (same session, same request, hence
        the same sequence number and token) continues that submit's call."""
        key = (name, json.dumps(request, sort_keys=True, default=str))
        call = self._retrying.pop(key, None)
        if call is None:
            kind, body = _kind_of(request)
            seq = request.get("sequenceNumber") if kind in vocab.TRAINING_OPS else None
            number = seq if isinstance(seq, int) else None
            call = self.calls.record(name, kind, number, body, request)
            call.retry_key = key
        call.attempts += 1
        if isinstance(outcome, ServiceError):
            call.error_code, call.refusal = outcome.code, outcome.message
            if vocab.is_retryable(outcome.code, outcome.http_status):
                if call.attempts < vocab.SDK_SUBMIT_ATTEMPTS:
                    self._retrying[key] = call  # the client sends it again
            return
        call.error_code = call.refusal = None
        call.operation_id = outcome["operationId"]
        call.op = self.runtime.operation(name, call.operation_id)
        self._by_operation[call.operation_id] = call

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
        for session in self.runtime.sessions():
            gate = _gate(session.engine)
            if gate is not None:
                gate.set_manual(manual)

    def _visible(self, operation_id: str) -> bool:
        if not self._manual:
            return True
        call = self._by_operation.get(operation_id)
        return call is None or call.released

    def on_operation_done(self, name: str, operation_id: str, callback: Any) -> None:
        """Completion callbacks fire when the manual clock releases the op, not before."""
        self.runtime.operation(name, operation_id)  # unknown ids raise as usual
        with self._clock:
            if not self._visible(operation_id):
                self._held.setdefault(operation_id, []).append((name, callback))
                return
        self.runtime.on_operation_done(name, operation_id, callback)

    def _release_callbacks(self, operation_ids: list[str]) -> None:
        with self._clock:
            held = [(op_id, *pair) for op_id in operation_ids for pair in self._held.pop(op_id, [])]
        for op_id, name, callback in held:
            self.runtime.on_operation_done(name, op_id, callback)

    def _settle(self, call: Call) -> None:
        """Let ``call``'s op run (through its engine's gate) and wait until it is terminal."""
        op = call.op
        assert op is not None
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while op.status not in vocab.OP_TERMINAL:
            session = next((s for s in self.runtime.sessions() if s.name == call.session), None)
            gate = _gate(session.engine if session is not None else None)
            if call.seq is not None and gate is not None and gate.waiting:
                gate.grant()  # the worker runs ops in order: the waiting call is this op
                op.done.wait(SETTLE_TIMEOUT)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{call} did not finish within {SETTLE_TIMEOUT:.0f}s")
            op.done.wait(0.0005)
        if op.status not in vocab.OP_TERMINAL:
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
        self.runtime.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        if self._restore_threads is not None:
            import torch

            torch.set_num_threads(self._restore_threads)
            self._restore_threads = None
