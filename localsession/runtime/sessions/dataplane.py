"""The runtime's data plane: Execute{Training,Sampling}Operation, Get*OperationResult, waits.

:class:`DataPlane` validates a submit, hands a training op to its session's ordered queue or a
sampling op to the service's scheduler, and answers polls and waits. Observers see every
submit, accepted or refused (the fakes' call log). It reaches the service only through the
narrow :class:`SessionsView` (sessions, operations, the scheduler, weights, faults), so it
imports nothing of the service module.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from localsession import cpu_threads, vocab
from localsession.port import SampleRequest
from localsession.port_commands import SampleCommand, TrainingCommand
from localsession.port_results import LoadResult, OpOutcome
from localsession.runtime import commands, errors, validate
from localsession.runtime.config import ServiceConfig
from localsession.runtime.faults import Faults
from localsession.runtime.sessions import stops
from localsession.runtime.sessions.lifecycle import Session
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.scheduler import SamplingScheduler, make_job

#: A runtime submit as an observer sees it: the session name, the wire request, and the
#: response (``{"operationId": ...}``) or the :class:`~errors.ServiceError` that refused it.
Observer = Callable[[str, dict[str, Any], "dict[str, Any] | errors.ServiceError"], None]


class SessionsView(Protocol):
    """What the data plane needs of the service that holds the sessions."""

    config: ServiceConfig
    faults: Faults

    @property
    def scheduler(self) -> SamplingScheduler: ...

    def session(self, name: str) -> Session: ...

    def operation(self, name: str, operation_id: str) -> Operation: ...

    def sampling_weights(self, session: Session, arn: str | None) -> str | None: ...


class DataPlane:
    """The runtime operations of a service's sessions."""

    def __init__(self, service: SessionsView) -> None:
        self.service = service
        self.observers: list[Observer] = []

    def _observed(
        self, name: str, request: dict[str, Any], submit: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        if not self.observers:
            return submit()
        try:
            response = submit()
        except errors.ServiceError as exc:
            for observer in self.observers:
                observer(name, request, exc)
            raise
        for observer in self.observers:
            observer(name, request, response)
        return response

    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self._observed(name, request, lambda: self._execute_training(name, request))

    def _execute_training(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        faults = self.service.faults
        if faults.armed:
            faults.on_request()
        session = self.service.session(name)
        try:
            seq, token, command = validate.training_request(request, session.strict)
            if faults.armed:
                faults.on_submit(command.kind)
            return {"operationId": session.submit_training(seq, token, command)}
        except errors.ServiceError as exc:
            number = request.get("sequenceNumber")
            refused = (
                exc.http_status < 500 and exc.code != vocab.ErrorCode.THROTTLING
            )  # 429 is retried
            if self.service.config.lenient_sequence and refused and type(number) is int:
                session.consume(number)
            raise

    def submit_training(
        self, name: str, seq: int, command: TrainingCommand, client_token: str = ""
    ) -> str:
        """Queue a typed training command under ``seq``; return its operation id. A refused
        command (a 4xx other than throttling) still consumes its number, so no later op
        waits for it: a typed caller's numbers are its own, never re-sent after a refusal."""
        faults = self.service.faults
        if faults.armed:
            faults.on_request()
        session = self.service.session(name)
        try:
            number = commands.sequence_number(seq)
            commands.checked(command, session.strict)
            if faults.armed:
                faults.on_submit(command.kind)
            return session.submit_training(number, client_token, command)
        except errors.ServiceError as exc:
            refused = (
                exc.http_status < 500 and exc.code != vocab.ErrorCode.THROTTLING
            )  # 429 is retried
            if refused and type(seq) is int and seq >= 1:
                session.consume(seq)
            raise

    def refuse_sequence(self, name: str, seq: int) -> None:
        """Record that a dialect refused request number ``seq`` before submitting it, so the
        ops numbered after it do not wait for it (a number already used is left alone)."""
        self.service.session(name).consume(commands.sequence_number(seq))

    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        """Submit a wire sampling op (ExecuteSamplingOperation)."""
        return self._observed(name, request, lambda: self._execute_sampling(name, request))

    def _execute_sampling(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        faults = self.service.faults
        if faults.armed:
            faults.on_request()
        session = self.service.session(name)
        session.require_accepting()
        kind, command, tokens, arn = validate.sampling_request(request, session.strict)
        return {"operationId": self._submit_sampling(session, kind, tokens, command, arn)}

    def submit_sample(self, name: str, command: SampleCommand) -> str:
        """Submit a typed ``sample`` command; return its operation id."""
        faults = self.service.faults
        if faults.armed:
            faults.on_request()
        session = self.service.session(name)
        session.require_accepting()
        # the strict limits are the SageMaker service's own (a typed sample is never held
        # to them)
        commands.checked(command, strict=False)
        prompt = list(command.request.prompt)
        return self._submit_sampling(
            session, vocab.OpKind.SAMPLE, prompt, command, command.package_arn
        )

    def _submit_sampling(
        self,
        session: Session,
        kind: str,
        tokens: list[int],
        command: SampleCommand | None,
        arn: str | None,
    ) -> str:
        faults = self.service.faults
        request: SampleRequest | None = None
        if command is not None:
            request = self._settled(session, command, tokens)
        if faults.armed:
            faults.on_submit(kind)
        weights = self.service.sampling_weights(session, arn)
        op = Operation(kind=kind, id=str(uuid.uuid4()))
        with session.lock:
            session.ops[op.id] = op
        session.track(op)
        if faults.armed and (failure := faults.on_execute(kind)) is not None:
            op.finish(
                vocab.OpStatus.FAILED, error=failure
            )  # an injected fault: the op ran and failed
            return op.id
        if kind == vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING:
            session.sampling_package = weights
            op.finish(vocab.OpStatus.COMPLETED, result=LoadResult())
            return op.id
        self.service.scheduler.submit(make_job(session, op, weights, request, tokens))
        return op.id

    @staticmethod
    def _settled(session: Session, command: SampleCommand, tokens: list[int]) -> SampleRequest:
        """The engine's request: the seed drawn if none was given, the stop ids checked and
        completed from the stop strings (runtime/sessions/stops.py)."""
        request = command.request
        engine = session.engine if request.stop else None
        tokenizer = engine.get_tokenizer() if engine is not None else None
        stop_ids = stops.stop_token_ids(request.stop_token_ids, request.stop, tokenizer)
        seed = random.SystemRandom().randrange(2**31) if command.seed is None else command.seed
        return replace(request, prompt=tokens, seed=seed, stop_token_ids=stop_ids)

    def get_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        """Get{Training,Sampling}OperationResult (both read the session's op table)."""
        if self.service.faults.armed:
            self.service.faults.on_request()
        return self.service.operation(name, operation_id).response()

    def operation_outcome(self, name: str, operation_id: str) -> OpOutcome:
        """An op's status and typed result: what ``get_operation_result`` reads, before the
        SageMaker wire's shape (for a dialect that serialises results its own way)."""
        if self.service.faults.armed:
            self.service.faults.on_request()
        op = self.service.operation(name, operation_id)
        status = op.status  # read once: the result is set before the status moves
        result = op.result if status == vocab.OpStatus.COMPLETED else None
        return OpOutcome(status, result, op.error if status in vocab.OP_TERMINAL else None)

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool:
        """Block until an op is terminal or ``timeout`` passes; True if terminal."""
        op = self._awaited(name, operation_id, idles=timeout != 0)
        return op.status in vocab.OP_TERMINAL or op.done.wait(timeout)

    def on_operation_done(self, name: str, operation_id: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the op is terminal (at once if it is), from the finishing
        thread: the non-blocking form of :meth:`wait_operation`, for an event loop."""
        self._awaited(name, operation_id, idles=True).add_done_callback(callback)

    def _awaited(self, name: str, operation_id: str, *, idles: bool) -> Operation:
        """An op someone starts to wait on. A training op's worker is woken if a submit left
        it asleep: this waiter does not run the op (runtime/sessions/runner.py). A caller
        whose thread ``idles`` until the op ends (blocked on it, or an event loop awaiting it)
        first hands back its OpenMP threads: meanwhile they would only slow the thread that
        runs the op (cpu_threads.py)."""
        op = self.service.operation(name, operation_id)
        if op.status not in vocab.OP_TERMINAL:
            if op.seq is not None:
                self.service.session(name).runner.wake_worker()
            if idles:
                cpu_threads.release()
        return op
