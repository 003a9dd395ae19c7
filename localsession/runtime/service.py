"""The service, in-process: sessions and their operations over wire-shaped dicts.

:class:`Service` is the one implementation of the client's ``Backend`` seam. Its methods are
the service's operations (``create_training_session``, ``execute_training_operation``, ...),
taking and returning the same JSON shapes the wire carries, so the in-process clients, the HTTP
server and the fakes all drive the same behaviour. It imports no torch: the engine is made by
``config.engine_factory`` when a session starts.

This module is the front: the session control plane, and one method per operation forwarding
to the module that owns its resource (moto-style):

- runtime/sessions/table.py: the session table (names, limits, idle expiry, records on disk);
- runtime/sessions/dataplane.py: Execute*/Get*OperationResult, waits and submit observers;
- runtime/config.py: :class:`ServiceConfig`, every setting and its ``LOCALSESSION_*`` variable;
- runtime/paging.py: ``MaxResults``/``NextToken`` for the List* calls;
- runtime/packages/listing.py: the model-package registry's operations;
- runtime/control.py: the typed control plane of a dialect with its own wire (stop, state,
  packages by key);
- runtime/chat/chat_completions.py: OpenAI chat completions sampled by sessions.

The engine factory and the default catalog's tokenizer writer come from the composition root,
:mod:`localsession.wiring`, never from here.

Length: the one front of every operation; each method is a few lines forwarding to its module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from localsession import vocab
from localsession.port import Engine, EngineConfigError, EngineSpec
from localsession.port_commands import SampleCommand, SessionCommand, TrainingCommand
from localsession.port_results import OpOutcome
from localsession.runtime import commands, errors, validate
from localsession.runtime.chat.chat_completions import Completions, PreparedChat
from localsession.runtime.config import DEFAULT_ACCOUNT, ServiceConfig
from localsession.runtime.control import ControlPlane, described
from localsession.runtime.events import EventLog
from localsession.runtime.faults import Faults
from localsession.runtime.models import hub
from localsession.runtime.models.catalog import LocalCatalog, ModelCatalog
from localsession.runtime.packages.listing import ModelPackages
from localsession.runtime.packages.registry import Registry
from localsession.runtime.paging import page
from localsession.runtime.sessions.dataplane import DataPlane, Observer
from localsession.runtime.sessions.lifecycle import Session
from localsession.runtime.sessions.operations import Operation
from localsession.runtime.sessions.package_fit import PackageMismatch, compatible_package
from localsession.runtime.sessions.scheduler import SamplingScheduler
from localsession.runtime.sessions.table import SessionTable

__all__ = [
    "DEFAULT_ACCOUNT",
    "Observer",
    "PreparedChat",
    "Service",
    "ServiceConfig",
]


def unwired_engine(spec: EngineSpec) -> Engine:
    """The engine factory of a service built without one: the session fails, naming the fix."""
    raise EngineConfigError(
        "this service was built without an engine factory: build it with "
        "localsession.wiring.build_service(config), or pass ServiceConfig(engine_factory=...)"
    )


class Service:
    """Sessions, their queues and the sampling scheduler, behind the service's operations.

    ``catalog`` resolves every base-model name (runtime/models/catalog.py); observers added with
    :meth:`add_observer` see every runtime submit (the fakes' call log).
    """

    def __init__(self, config: ServiceConfig, *, catalog: ModelCatalog | None = None) -> None:
        self.config = config
        #: Every base-model name is resolved through this (runtime/models/catalog.py); by default
        #: the local catalog over ``config.home``, without a tokenizer writer (the wiring's
        #: ``build_service`` gives it the engine's).
        self.catalog: ModelCatalog = catalog or LocalCatalog(self.config.home)
        self._mutex = threading.Lock()  # guards opening the registry
        gather = self.config.gather_quiet_s
        self._scheduler = (
            SamplingScheduler() if gather is None else SamplingScheduler(gather_quiet_s=gather)
        )
        self._registry: Registry | None = None
        self.table = SessionTable(self.config, lambda: self.registry)
        #: The resources beside the sessions, each in its own module (see the docstring).
        self.dataplane = DataPlane(self)
        self.packages = ModelPackages(lambda: self.registry, self.catalog)
        self.completions = Completions(self)
        #: The typed control plane (stop, state, packages by key) of a dialect with its own
        #: wire: it never builds or reads the SageMaker dicts of the methods below.
        self.control = ControlPlane(self.table, lambda: self.registry)
        #: Injected faults (runtime/faults.py; tests, fakes, admin route) and the ops' events.
        self.faults, self.events = Faults(), EventLog()

    @property
    def registry(self) -> Registry:
        """The package registry, opened (and swept of interrupted writes) on first use."""
        with self._mutex:
            if self._registry is None:
                self._registry = Registry(self.config.home, self.config.region, self.config.account)
            return self._registry

    # -- public accessors (for the fakes, the server's admin routes and tests) -------------

    def session(self, name: str) -> Session:
        """A session by name; ``ResourceNotFoundException`` if there is none."""
        return self.table.get(name, runtime=True)

    def sessions(self) -> list[Session]:
        """Every session this service holds (a snapshot list, any status)."""
        return self.table.all()

    def operation(self, name: str, operation_id: str) -> Operation:
        """One op of a session; ``ResourceNotFoundException`` if either is unknown."""
        op = self.session(name).ops.get(operation_id)
        if op is None:
            raise errors.not_found(
                f"Operation {operation_id} does not exist in training session {name}.",
                runtime=True,
            )
        return op

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(name, request, outcome)`` after each runtime submit, on its thread."""
        self.dataplane.observers.append(observer)

    @property
    def scheduler(self) -> SamplingScheduler:
        """The sampling scheduler every session's sampling ops (and chat requests) go to."""
        return self._scheduler

    # -- control plane ---------------------------------------------------------------------

    def create_training_session(
        self,
        request: dict[str, Any],
        *,
        strict: bool | None = None,
        region: str | None = None,
    ) -> dict[str, Any]:
        """CreateTrainingSession. ``strict`` overrides the service default for this session;
        ``region`` (the caller's: the client's, or the request's SigV4 scope) is the one its
        ARN and its packages' ARNs name (default: the service's)."""
        name = validate.session_name(request.get("TrainingSessionName"))
        validate.create_request(request, check_members=self.config.check_create_members)
        command = validate.session_command(request, name, strict=strict, region=region)
        return {"TrainingSessionArn": self.create_session(command)}

    def create_session(self, command: SessionCommand) -> str:
        """CreateTrainingSession from a typed command (a dialect's own wire); its ARN."""
        name = validate.session_name(command.name)
        c = self.config  # its engine options ride on the spec (None: the defaults)
        spec = commands.engine_spec(command, self.catalog, c.local_model_paths, c.engine_options)
        arn = (
            f"arn:aws:sagemaker:{command.region or self.config.region}:{self.config.account}:"
            f"training-session/{name}"
        )
        strict = self.config.strict if command.strict is None else command.strict
        self.table.add(
            name,
            lambda: Session(
                name,
                arn,
                spec,
                dict(command.details) or described(command, self.config.account),
                strict=strict,
                gap_timeout=self.config.gap_timeout,
                engine_factory=self.config.engine_factory or unwired_engine,
                registry=lambda: self.registry,
                faults=self.faults,
                max_queued=self.config.max_queued_ops,
                on_change=self.table.persist,
                resolve_model=self.catalog.resolve,
                events=self.events,
            ),
        )
        return arn

    def describe_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        validate.session_name(request.get("TrainingSessionName"))
        session = self.table.get(request.get("TrainingSessionName"), runtime=False)
        return {"TrainingSessionDetail": session.describe()}

    def list_training_sessions(self, request: dict[str, Any]) -> dict[str, Any]:
        self.table.expire_idle()
        validate.list_sessions_request(request)
        contains, status = request.get("NameContains"), request.get("StatusEquals")
        sessions = sorted(self.table.all(), key=lambda s: s.creation_time, reverse=True)
        rows = [
            s
            for s in sessions
            if (not contains or contains in s.name) and (not status or s.status == status)
        ]
        return page(
            rows,
            request,
            "TrainingSessionSummaries",
            lambda s: {
                "TrainingSessionArn": s.arn,
                "TrainingSessionName": s.name,
                "TrainingSessionStatus": s.status,
                "CreationTime": s.creation_time,
                "LastModifiedTime": s.last_modified_time,
            },
        )

    def stop_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        validate.session_name(request.get("TrainingSessionName"))
        self.table.get(request.get("TrainingSessionName"), runtime=False).stop()
        return {}

    def expire_session(self, name: str) -> None:
        """Expire a Running or Blocked session now, as its idle timeout would (queued training
        ops finish Skipped; later runtime calls get ConflictException). For tests and the
        admin route; a session in any other status is left as it is."""
        self.table.get(name, runtime=False).expire()

    def delete_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        validate.session_name(request.get("TrainingSessionName"))
        session = self.table.get(request.get("TrainingSessionName"), runtime=False)
        if session.status not in vocab.SESSION_DELETABLE:
            raise errors.validation(
                f"Training session {session.name} is {session.status}; stop it before deleting it."
            )
        self.table.remove(session.name)
        return {}

    # -- model registry (runtime/packages/listing.py) ---------------------------------------------

    def list_model_packages(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.packages.list_model_packages(request)

    def describe_model_package(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.packages.describe_model_package(request)

    def delete_model_package(
        self, request: dict[str, Any], *, delete_artifacts: bool = False
    ) -> dict[str, Any]:
        return self.packages.delete_model_package(request, delete_artifacts=delete_artifacts)

    def create_model_package_group(
        self, request: dict[str, Any], *, region: str | None = None
    ) -> dict[str, Any]:
        return self.packages.create_model_package_group(request, region=region)

    def describe_model_package_group(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.packages.describe_model_package_group(request)

    # -- the local Hub (base models) --------------------------------------------------------

    def list_hub_contents(self, request: dict[str, Any]) -> dict[str, Any]:
        return hub.list_hub_contents(request, self.config.region, self.catalog)

    def describe_hub_content(self, request: dict[str, Any]) -> dict[str, Any]:
        return hub.describe_hub_content(request, self.config.region, self.catalog, self.hub_cache)

    @property
    def hub_cache(self) -> Path:
        """The Hugging Face cache the local Hub exports tokenizers into (runtime/models/hub.py)."""
        return self.config.hub_cache or self.config.home / hub.HUB_CACHE_DIR

    # -- runtime (runtime/sessions/dataplane.py) ---------------------------------------------------

    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.dataplane.execute_training_operation(name, request)

    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.dataplane.execute_sampling_operation(name, request)

    # -- the typed runtime calls (port_commands; a dialect with a wire of its own) -----------

    def submit_training(
        self, name: str, seq: int, command: TrainingCommand, client_token: str = ""
    ) -> str:
        """Queue a training command as op ``seq``; its id. A refusal still consumes ``seq``."""
        return self.dataplane.submit_training(name, seq, command, client_token)

    def refuse_sequence(self, name: str, seq: int) -> None:
        """A dialect refused request ``seq`` before submitting it: record the number used,
        so the ops after it run without waiting out the gap timeout."""
        self.dataplane.refuse_sequence(name, seq)

    def submit_sample(self, name: str, command: SampleCommand) -> str:
        """Submit a typed ``sample`` command; its operation id."""
        return self.dataplane.submit_sample(name, command)

    def get_training_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        return self.dataplane.get_operation_result(name, operation_id)

    def get_sampling_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        return self.dataplane.get_operation_result(name, operation_id)

    def operation_outcome(self, name: str, operation_id: str) -> OpOutcome:
        """A training or sampling op's status and typed result (``port_results``): the
        runtime call for a dialect that serialises results to a wire of its own."""
        return self.dataplane.operation_outcome(name, operation_id)

    # -- chat completions (runtime/chat/chat_completions.py) --------------------------------

    def chat_prepare(
        self,
        target: str,
        body: dict[str, Any],
        *,
        model_package: str | None = None,
        text: bool = False,
    ) -> PreparedChat:
        """Check a chat-completions request and render its prompt (Completions.prepare); with
        ``text``, a text-completions request, its prompt as is (``prepare_text``)."""
        prepare = self.completions.prepare_text if text else self.completions.prepare
        return prepare(target, body, model_package=model_package)

    def chat_run(self, prepared: PreparedChat) -> dict[str, Any]:
        """Sample a prepared chat request (blocking): the ``chat.completion`` body."""
        return self.completions.run(prepared)

    def chat_stream(self, prepared: PreparedChat) -> Iterator[dict[str, Any]]:
        """``chat.completion.chunk`` bodies for a prepared request, as tokens are decoded."""
        return self.completions.stream(prepared)

    def chat_models(self) -> list[dict[str, Any]]:
        """``/v1/models``: the running sessions, then every model package, newest first."""
        return self.completions.models()

    def sampling_weights(self, session: Session, arn: str | None) -> str | None:
        """Which weights a sampling op reads (docs/semantics.md#3): the ARN's package, else
        the session's ``loadWeightsForSampling`` package, else the base model (None)."""
        if not arn:
            return session.sampling_package
        try:
            return str(compatible_package(session, arn))
        except PackageMismatch as exc:
            raise errors.validation(str(exc)) from None
        except errors.ServiceError as exc:
            raise errors.not_found(exc.message, runtime=True) from None

    # -- the in-process extension (client/backend.py InProcessExtension) -------------------

    @property
    def in_process(self) -> Service:
        """What only an in-process caller can ask (waits, callbacks, tokenizers, models)."""
        return self

    def wait_for_session(self, name: str, timeout: float | None = None) -> str:
        """Block until a new session leaves Created (in-process shortcut for Describe polling)."""
        return self.table.get(name, runtime=False).wait_until_started(timeout)

    def list_base_models(self) -> list[str]:
        """The ids the SDK's ``list_base_models()`` reports over the wire, in its order."""
        return self.catalog.names()

    def resolve_base_model(self, name: str) -> None:
        """Raise ``ValueError`` (listing the models and the fix) if ``name`` cannot load."""
        self.catalog.resolve(name)

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool:
        """Block until an op is terminal or ``timeout`` passes; True if terminal."""
        return self.dataplane.wait_operation(name, operation_id, timeout)

    def on_operation_done(self, name: str, operation_id: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the op is terminal (at once if it is), from the finishing
        thread: the non-blocking form of :meth:`wait_operation`, for an event loop."""
        self.dataplane.on_operation_done(name, operation_id, callback)

    def run_here(self, name: str, operation_id: str) -> bool:
        """For a caller about to wait on a training op: run it, and the queued ops before
        it, on the calling thread when they may run there (runtime/sessions/runner.py);
        else (an unknown session included) return at once. True if the op has finished."""
        try:
            session = self.session(name)
        except errors.ServiceError:
            return False  # the caller's read of the result reports it
        return session.runner.run_here(operation_id)

    def backoff(self, seconds: float) -> None:
        """How an in-process client waits before retrying a throttled request: real time."""
        time.sleep(seconds)

    def get_tokenizer(self, name: str) -> Any:
        """The tokenizer of a session's model (in-process only; the wire has no such call)."""
        session = self.session(name)
        session.wait_until_started()
        if session.engine is None:
            raise errors.conflict(
                f"Training session {name} has no model loaded ({session.status})."
            )
        return session.engine.get_tokenizer()

    def reset(self, *, forget: bool = True) -> int:
        """Stop and forget every session (the server's admin reset); return how many.
        Model packages on disk are kept; so are session records when ``forget`` is False."""
        return self.table.clear(forget=forget)

    def close(self) -> None:
        """Stop every session and the scheduler (for tests and server shutdown); their
        records stay, as Stopped, for the next service on this home."""
        self.reset(forget=False)
        self._scheduler.close()
