"""The service, in-process: the control plane and runtime operations over wire-shaped dicts.

:class:`Service` is the one implementation of the client's ``Backend`` seam. Its methods are
the service's operations (``create_training_session``, ``execute_training_operation``, ...),
taking and returning the same JSON shapes the wire carries, so the in-process clients, the HTTP
server and the fakes all drive the same behaviour. It imports no torch: the engine is made by
``engine_factory`` when a session starts.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from localsession.runtime import chat, errors, hub, streaming, validate
from localsession.runtime.catalog import (
    LocalCatalog,
    ModelCatalog,
    hub_content_name,
    localsession_home,
)
from localsession.runtime.engine_api import Engine, EngineSpec, ResolvedModel, SampleRequest
from localsession.runtime.faults import Faults
from localsession.runtime.operations import COMPLETED, FAILED, TERMINAL, Operation
from localsession.runtime.persist import SessionStore
from localsession.runtime.registry import Registry
from localsession.runtime.scheduler import SamplingScheduler, make_job
from localsession.runtime.session import ACTIVE, DELETABLE, PackageMismatch, Session

DEFAULT_ACCOUNT = "000000000000"
logger = logging.getLogger(__name__)
_Row = TypeVar("_Row")


def _default_engine_factory(spec: EngineSpec) -> Engine:
    from localsession.engine import create_engine  # torch is imported here, not before

    return create_engine(spec)


def _default_tokenizer_writer(model: ResolvedModel, directory: Path) -> None:
    from localsession.engine import write_tokenizer  # transformers is imported here

    write_tokenizer(model, directory)


def _env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass
class ServiceConfig:
    """Service-wide settings (docs/semantics.md#4); every one is configurable."""

    region: str = "us-west-2"
    account: str = DEFAULT_ACCOUNT
    max_sessions: int = 4
    #: Service limits on (the default) or lifted (``--relaxed`` / ``strict=False``).
    strict: bool = True
    #: Seconds a missing sequence number blocks later ops before it is recorded lost.
    gap_timeout: float = 60.0
    #: Count a sequence number whose submit was refused (4xx) as used (``--lenient-sequence``).
    lenient_sequence: bool = False
    #: Seconds of inactivity before a session becomes Expired; None = never.
    idle_timeout: float | None = None
    #: State directory: the model-package registry lives under it (docs/semantics.md#5).
    home: Path = field(default_factory=localsession_home)
    engine_factory: Callable[[EngineSpec], Engine] = field(default=_default_engine_factory)
    #: Training ops one session may hold queued; past it submits get ThrottlingException
    #: (which the SDK retries). ``--max-queued-ops``.
    max_queued_ops: int = 1024
    #: Keep a record of every session under ``home/sessions`` and load them at start, so a
    #: restarted server reports the sessions it lost as Failed (runtime/persist.py). The
    #: server turns this on; in-process sessions end with their process.
    persist_sessions: bool = False
    #: Let ``BaseModelArn`` name a local directory or any resolvable name. A server turns
    #: this off: remote callers may name only the listed models (or their Hub ARNs), never a
    #: path on the server's disk.
    local_model_paths: bool = True
    #: Where the local Hub exports tokenizers for clients (default ``home/hf-hub``); live
    #: ``localsession.mock()`` contexts share one, since HF_HUB_CACHE is process-wide.
    hub_cache: Path | None = None
    #: The sampling scheduler's gathering window in seconds (None: the scheduler's default).
    #: An instant engine (the fakes) sets 0: a batch is taken as soon as one op is queued.
    gather_quiet_s: float | None = None
    #: Refuse CreateTrainingSession members outside botocore's model of the ``sagemaker``
    #: API. Reading that model costs 0.1-0.5 s on the first create; the light fakes, whose
    #: requests come from their own client, turn it off.
    check_create_members: bool = True

    @classmethod
    def from_env(cls, **overrides: Any) -> ServiceConfig:
        """Defaults, then ``LOCALSESSION_*`` variables, then explicit overrides."""
        config = cls(
            region=os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-west-2",
            max_sessions=int(os.environ.get("LOCALSESSION_MAX_SESSIONS", "4")),
            gap_timeout=_env_float("LOCALSESSION_GAP_TIMEOUT", 60.0) or 0.0,
            idle_timeout=_env_float("LOCALSESSION_IDLE_TIMEOUT", None),
        )
        for key, value in overrides.items():
            setattr(config, key, value)
        return config


def _page(
    rows: list[_Row], request: dict[str, Any], key: str, summary: Callable[[_Row], dict[str, Any]]
) -> dict[str, Any]:
    """One page of a List* call: the summaries of ``MaxResults`` rows from the offset in
    ``NextToken`` under ``key``, and the ``NextToken`` of the next page if there is one."""
    limit, token = request.get("MaxResults", 100), request.get("NextToken") or "0"
    if type(limit) is not int or not 1 <= limit <= 100:
        raise errors.validation(f"MaxResults={limit!r} must be an integer in [1, 100]")
    if not isinstance(token, str) or not (token.isascii() and token.isdigit()):
        raise errors.validation(f"NextToken {token!r} is not a token this service issued")
    start = int(token)
    body: dict[str, Any] = {key: [summary(row) for row in rows[start : start + limit]]}
    if start + limit < len(rows):
        body["NextToken"] = str(start + limit)
    return body


#: A runtime submit as an observer sees it: the session name, the wire request, and the
#: response (``{"operationId": ...}``) or the :class:`~errors.ServiceError` that refused it.
Observer = Callable[[str, dict[str, Any], "dict[str, Any] | errors.ServiceError"], None]


class Service:
    """Sessions, their queues and the sampling scheduler, behind the service's operations.

    ``catalog`` resolves every base-model name (runtime/catalog.py); observers added with
    :meth:`add_observer` see every runtime submit (the fakes' call log).
    """

    def __init__(
        self, config: ServiceConfig | None = None, *, catalog: ModelCatalog | None = None
    ) -> None:
        self.config = config or ServiceConfig.from_env()
        #: Every base-model name is resolved through this (runtime/catalog.py); by default
        #: the local catalog over ``config.home``, with the engine's tokenizer writer.
        self.catalog: ModelCatalog = catalog or LocalCatalog(
            self.config.home, tokenizer_writer=_default_tokenizer_writer
        )
        self._mutex = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._observers: list[Observer] = []
        gather = self.config.gather_quiet_s
        self._scheduler = (
            SamplingScheduler() if gather is None else SamplingScheduler(gather_quiet_s=gather)
        )
        self._registry: Registry | None = None
        #: Injected faults (runtime/faults.py): armed by tests, the fakes and the admin route.
        self.faults = Faults()
        self._store = SessionStore(self.config.home) if self.config.persist_sessions else None
        if self._store is not None:
            for record in self._store.load():
                try:
                    session = Session.restore(record, lambda: self.registry, self._persist)
                except (KeyError, TypeError, ValueError) as exc:
                    logger.warning("skipping session record %r: %r", record.get("name"), exc)
                    continue
                self._sessions[session.name] = session
                self._store.save(session.record())

    def _persist(self, session: Session) -> None:
        """Record a session's new status (called under its lock; see runtime/persist.py)."""
        if self._store is not None:
            self._store.save(session.record())

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
        return self._session(name, runtime=True)

    def sessions(self) -> list[Session]:
        """Every session this service holds (a snapshot list, any status)."""
        with self._mutex:
            return list(self._sessions.values())

    def operation(self, name: str, operation_id: str) -> Operation:
        """One op of a session; ``ResourceNotFoundException`` if either is unknown."""
        return self._operation(name, operation_id)

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(name, request, outcome)`` after every runtime submit
        (ExecuteTraining/SamplingOperation), accepted or refused, on the caller's thread."""
        self._observers.append(observer)

    def _observed(
        self, name: str, request: dict[str, Any], submit: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        if not self._observers:
            return submit()
        try:
            response = submit()
        except errors.ServiceError as exc:
            for observer in self._observers:
                observer(name, request, exc)
            raise
        for observer in self._observers:
            observer(name, request, response)
        return response

    # -- helpers ---------------------------------------------------------------------------

    def _session(self, name: Any, *, runtime: bool) -> Session:
        self._expire_idle()
        with self._mutex:
            session = self._sessions.get(name) if isinstance(name, str) else None
        if session is None:
            raise errors.not_found(f"Training session {name!r} does not exist.", runtime=runtime)
        return session

    def _expire_idle(self) -> None:
        idle = self.config.idle_timeout
        if idle is None:
            return
        now = time.monotonic()
        with self._mutex:
            sessions = list(self._sessions.values())
        for session in sessions:
            if session.running_op is None and now - session.last_activity > idle:
                session.expire()

    # -- control plane ---------------------------------------------------------------------

    def create_training_session(
        self, request: dict[str, Any], *, strict: bool | None = None, region: str | None = None
    ) -> dict[str, Any]:
        """CreateTrainingSession. ``strict`` overrides the service default for this session;
        ``region`` (the caller's: the client's, or the request's SigV4 scope) is the one its
        ARN and its packages' ARNs name (default: the service's)."""
        name = validate.session_name(request.get("TrainingSessionName"))
        validate.create_request(request, check_members=self.config.check_create_members)
        lora = request.get("LoraConfig") or {}
        rank, alpha = lora.get("Rank"), lora.get("Alpha")
        if not isinstance(rank, int) or not 1 <= rank <= 256:
            raise errors.validation(f"LoraConfig.Rank={rank!r} must be an integer in [1, 256]")
        if not isinstance(alpha, int) or alpha < 1:
            raise errors.validation(f"LoraConfig.Alpha={alpha!r} must be an integer >= 1")
        base_model = (request.get("ModelConfig") or {}).get("BaseModelArn")
        if not isinstance(base_model, str) or not base_model:
            raise errors.validation("ModelConfig.BaseModelArn is required")
        # Sessions and their packages name the model, not the ARN or alias it was asked by.
        model = self.catalog.canonical_name(base_model)
        if not self.config.local_model_paths and model not in {
            self.catalog.canonical_name(listed) for listed in self.catalog.names()
        }:
            raise errors.validation(
                f"ModelConfig.BaseModelArn {base_model[:300]!r} is not a model this server "
                "serves; use a Hub content ARN or name from ListHubContents"
            )
        try:
            resolved = self.catalog.resolve(base_model)
        except ValueError as exc:
            raise errors.validation(str(exc)) from None
        arn = (
            f"arn:aws:sagemaker:{region or self.config.region}:{self.config.account}:"
            f"training-session/{name}"
        )
        details: dict[str, Any] = {
            key: request[key]
            for key in (
                "ModelPackageGroupArn",
                "RoleArn",
                "LoraConfig",
                "ModelConfig",
                "OutputConfig",
                "VpcConfig",
                "Tags",
            )
            if key in request
        }
        spec = EngineSpec(base_model=model, rank=rank, alpha=alpha, model=resolved)
        with self._mutex:
            if name in self._sessions:
                raise errors.resource_in_use(f"Training session {name} already exists.")
            active = sum(s.status in ACTIVE for s in self._sessions.values())
            if active >= self.config.max_sessions:
                raise errors.limit_exceeded(
                    f"{active} sessions are active, the limit is {self.config.max_sessions}. "
                    "Stop a session first, or raise the limit (LOCALSESSION_MAX_SESSIONS / "
                    "--max-sessions)."
                )
            self._sessions[name] = Session(
                name,
                arn,
                spec,
                details,
                strict=self.config.strict if strict is None else strict,
                gap_timeout=self.config.gap_timeout,
                engine_factory=self.config.engine_factory,
                registry=lambda: self.registry,
                faults=self.faults,
                max_queued=self.config.max_queued_ops,
                on_change=self._persist,
                resolve_model=self.catalog.resolve,
            )
            session = self._sessions[name]
        with session.cond:
            self._persist(session)
        return {"TrainingSessionArn": arn}

    def describe_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        validate.session_name(request.get("TrainingSessionName"))
        session = self._session(request.get("TrainingSessionName"), runtime=False)
        return {"TrainingSessionDetail": session.describe()}

    def wait_for_session(self, name: str, timeout: float | None = None) -> str:
        """Block until a new session leaves Created (in-process shortcut for Describe polling)."""
        return self._session(name, runtime=False).wait_until_started(timeout)

    def list_training_sessions(self, request: dict[str, Any]) -> dict[str, Any]:
        self._expire_idle()
        validate.list_sessions_request(request)
        contains, status = request.get("NameContains"), request.get("StatusEquals")
        with self._mutex:
            sessions = sorted(self._sessions.values(), key=lambda s: s.creation_time, reverse=True)
        rows = [
            s
            for s in sessions
            if (not contains or contains in s.name) and (not status or s.status == status)
        ]
        return _page(
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
        self._session(request.get("TrainingSessionName"), runtime=False).stop()
        return {}

    def expire_session(self, name: str) -> None:
        """Expire a Running or Blocked session now, as its idle timeout would (queued training
        ops finish Skipped; later runtime calls get ConflictException). For tests and the
        admin route; a session in any other status is left as it is."""
        self._session(name, runtime=False).expire()

    def delete_training_session(self, request: dict[str, Any]) -> dict[str, Any]:
        validate.session_name(request.get("TrainingSessionName"))
        session = self._session(request.get("TrainingSessionName"), runtime=False)
        if session.status not in DELETABLE:
            raise errors.validation(
                f"Training session {session.name} is {session.status}; stop it before deleting it."
            )
        with self._mutex:
            self._sessions.pop(session.name, None)
        if self._store is not None:
            self._store.remove(session.name)
        return {}

    # -- model registry --------------------------------------------------------------------

    def list_model_packages(self, request: dict[str, Any]) -> dict[str, Any]:
        """ListModelPackages, newest first, paginated by ``NextToken``."""
        packages = self.registry.list(str(request.get("ModelPackageGroupName") or ""))
        if request.get("SortOrder") == "Ascending":
            packages.reverse()
        return _page(
            packages,
            request,
            "ModelPackageSummaryList",
            lambda p: {
                "ModelPackageArn": p.arn,
                "ModelPackageGroupName": p.group,
                "ModelPackageVersion": p.version,
                "CreationTime": p.created(),
                "ModelPackageDescription": p.description,
                "ModelPackageStatus": "Completed",
            },
        )

    def describe_model_package(self, request: dict[str, Any]) -> dict[str, Any]:
        """DescribeModelPackage, with the fields the SDK reads (kind, base model, location)."""
        arn = str(request.get("ModelPackageName") or "")
        p = self.registry.get(arn)
        return {
            "ModelPackageName": p.group,
            "ModelPackageGroupName": p.group,
            "ModelPackageVersion": p.version,
            "ModelPackageArn": p.arn,
            "ModelPackageDescription": p.description,
            "CreationTime": p.created(),
            "ModelPackageStatus": "Completed",
            "InferenceSpecification": {
                "Containers": [
                    {
                        "IsCheckpoint": p.kind == "checkpoint",
                        "BaseModel": {
                            "HubContentName": _hub_name_of(p.base_model, self.catalog),
                            "HubContentVersion": hub.CONTENT_VERSION,
                        },
                        "ModelDataSource": {
                            "S3DataSource": {
                                "S3Uri": p.location(),
                                "S3DataType": "S3Prefix",
                            }
                        },
                    }
                ]
            },
            "CustomerMetadataProperties": {
                "LoraRank": str(p.lora_rank),
                "LoraAlpha": str(p.lora_alpha),
                "TrainingSession": p.session,
            },
        }

    def delete_model_package(
        self, request: dict[str, Any], *, delete_artifacts: bool = False
    ) -> dict[str, Any]:
        """DeleteModelPackage. In-process, ``delete_artifacts`` also removes the files;
        otherwise they move to ``retained/``. Returns where they went and how many were
        deleted (the in-process stand-in for the SDK's S3 step), and its ``S3Uri``."""
        arn = str(request.get("ModelPackageName") or "")
        location = self.registry.get(arn).location()
        kept, deleted = self.registry.delete(arn, keep_artifacts=not delete_artifacts)
        return {
            "RetainedAt": kept.as_uri() + "/" if kept else None,
            "ObjectsDeleted": deleted,
            "S3Uri": location,
        }

    def create_model_package_group(
        self, request: dict[str, Any], *, region: str | None = None
    ) -> dict[str, Any]:
        entry = self.registry.create_group(
            str(request.get("ModelPackageGroupName") or ""),
            str(request.get("ModelPackageGroupDescription") or ""),
            region,
        )
        return {"ModelPackageGroupArn": entry["ModelPackageGroupArn"]}

    def describe_model_package_group(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.registry.describe_group(str(request.get("ModelPackageGroupName") or ""))

    # -- the local Hub (base models) --------------------------------------------------------

    def list_hub_contents(self, request: dict[str, Any]) -> dict[str, Any]:
        return hub.list_hub_contents(request, self.config.region, self.catalog)

    def describe_hub_content(self, request: dict[str, Any]) -> dict[str, Any]:
        return hub.describe_hub_content(request, self.config.region, self.catalog, self.hub_cache)

    @property
    def hub_cache(self) -> Path:
        """The Hugging Face cache the local Hub exports tokenizers into (runtime/hub.py)."""
        return self.config.hub_cache or self.config.home / hub.HUB_CACHE_DIR

    def list_base_models(self) -> list[str]:
        """The ids the SDK's ``list_base_models()`` reports over the wire, in its order."""
        return self.catalog.names()

    def resolve_base_model(self, name: str) -> None:
        """Raise ``ValueError`` (listing the models and the fix) if ``name`` cannot load."""
        self.catalog.resolve(name)

    def canonical_model_name(self, name: str) -> str:
        """The model name a ``BaseModelArn`` (a name, alias or Hub content ARN) stands for."""
        return self.catalog.canonical_name(name)

    # -- runtime ---------------------------------------------------------------------------

    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self._observed(name, request, lambda: self._execute_training(name, request))

    def _execute_training(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.faults.armed:
            self.faults.on_request()
        session = self._session(name, runtime=True)
        try:
            seq, token, kind, body = validate.training_request(request, session.strict)
            if self.faults.armed:
                self.faults.on_submit(kind)
            return {"operationId": session.submit_training(seq, token, kind, body)}
        except errors.ServiceError as exc:
            number = request.get("sequenceNumber")
            refused = exc.http_status < 500 and exc.code != "ThrottlingException"  # 429 is retried
            if self.config.lenient_sequence and refused and type(number) is int:
                session.consume(number)
            raise

    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return self._observed(name, request, lambda: self._execute_sampling(name, request))

    def _execute_sampling(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.faults.armed:
            self.faults.on_request()
        session = self._session(name, runtime=True)
        session.require_accepting()
        kind, body, tokens = validate.sampling_request(request, session.strict)
        if self.faults.armed:
            self.faults.on_submit(kind)
        weights = self._sampling_weights(session, body.get("modelPackageArn"))
        op = Operation(kind=kind, body=body, id=str(uuid.uuid4()))
        with session.cond:
            session.ops[op.id] = op
        if self.faults.armed and (failure := self.faults.on_execute(kind)) is not None:
            op.finish(FAILED, error=failure)  # an injected fault: the op ran and failed
            return {"operationId": op.id}
        if kind == "loadWeightsForSampling":
            session.sampling_package = weights
            op.finish(COMPLETED, result={})
            return {"operationId": op.id}
        sample_request = None
        if kind == "sample":
            params = body["samplingParams"]
            seed = params.get("seed")
            sample_request = SampleRequest(
                prompt=tokens,
                num_samples=body["numSamples"],
                max_tokens=params["maxTokens"],
                temperature=params.get("temperature", 1.0),
                top_p=params.get("topP", 1.0),
                top_k=params.get("topK", -1),
                seed=random.SystemRandom().randrange(2**31) if seed is None else seed,
                stop=tuple(params.get("stop") or ()),
                include_prompt_logprobs=bool(body.get("includePromptLogprobs")),
                topk_prompt_logprobs=body.get("topkPromptLogprobs"),
            )
        self._scheduler.submit(make_job(session, op, weights, sample_request, tokens))
        return {"operationId": op.id}

    # -- chat completions (SampleTrainingSession, /v1/chat/completions) ---------------------

    def chat_prepare(
        self, target: str, body: dict[str, Any], *, model_package: str | None = None
    ) -> PreparedChat:
        """Check an OpenAI chat-completions request and render its prompt (no sampling yet).

        ``target`` is a session name or a model-package ARN (then any running session that
        can load it samples it); ``model_package`` (the ``X-Amzn-SageMaker-Model-Package``
        header) picks a checkpoint of the named session. Refusals raise here, before a
        response (or a stream) starts.
        """
        session, weights = self._chat_target(target, model_package)
        request = chat.parse_request(body)
        tokenizer = self.get_tokenizer(session.name)
        encoded = tokenizer.apply_chat_template(
            request.messages, tools=request.tools, add_generation_prompt=True, tokenize=True
        )
        prompt = [int(t) for t in (encoded["input_ids"] if "input_ids" in encoded else encoded)]
        return PreparedChat(request, target, session, weights, tokenizer, prompt)

    def chat_run(self, prepared: PreparedChat) -> dict[str, Any]:
        """Sample a prepared chat request (blocking) and return the ``chat.completion`` body.
        Sampling goes through the scheduler, so it is batched with ``sample`` ops and counted
        in the session's usage."""
        request, session, weights = prepared.request, prepared.session, prepared.weights
        tokenizer, prompt = prepared.tokenizer, prepared.prompt
        sampled = self._sample_now(session, weights, chat.sample_request(request, prompt))
        sequences = sampled["sequences"]
        tops: list[list[list[tuple[str, float]]] | None] = [None] * len(sequences)
        if request.top_logprobs:
            decode_one = lambda t: tokenizer.decode([t])  # noqa: E731
            for i, seq in enumerate(sequences):
                scored = self._sample_now(
                    session,
                    weights,
                    SampleRequest(
                        prompt=prompt + seq["tokens"],
                        max_tokens=1,
                        temperature=0.0,
                        topk_prompt_logprobs=request.top_logprobs,
                    ),
                )["topkPromptLogprobs"][len(prompt) :]
                tops[i] = [
                    [(decode_one(a["tokenId"]), float(a["logprob"])) for a in position]
                    for position in scored
                ]
        choices = [
            chat.Choice(
                text=_chat_text(tokenizer, seq["tokens"], request.stop),
                finish_reason="stop" if seq["stopReason"] == "stop" else "length",
                tokens=seq["tokens"],
                logprobs=seq["logprobs"],
                top=top,
            )
            for seq, top in zip(sequences, tops, strict=True)
        ]
        decode = lambda ids: tokenizer.decode(ids)  # noqa: E731
        return chat.completion(request, prepared.target, choices, len(prompt), decode)

    def chat_stream(self, prepared: PreparedChat) -> Iterator[dict[str, Any]]:
        """``chat.completion.chunk`` bodies for a prepared request, sent as tokens are
        decoded (runtime/streaming.py); batched and counted like ``chat_run``."""
        # top_logprobs need a scoring pass after generation, and a reply that offers tools
        # is parsed for tool calls once it is whole: both are sent when generation ends.
        if prepared.request.top_logprobs or prepared.request.tools:
            yield from chat.chunks(self.chat_run(prepared), prepared.request)
            return

        def submit(request: SampleRequest) -> Operation:
            op = Operation(kind="sample", body={}, id=str(uuid.uuid4()))
            job = make_job(prepared.session, op, prepared.weights, request, request.prompt)
            self._scheduler.submit(job)
            return op

        yield from streaming.stream_chat(submit, prepared, _chat_text)

    def _chat_target(self, target: str, model_package: str | None) -> tuple[Session, str | None]:
        """The session that samples a chat request, and which weights it reads."""
        if not target.startswith("arn:"):
            session = self._session(target, runtime=True)
            session.require_accepting()
            return session, self._sampling_weights(session, model_package)
        with self._mutex:
            running = [s for s in self._sessions.values() if s.status in ACTIVE]
        problems = []
        for session in running:
            try:
                return session, str(session.compatible_package(target))
            except (PackageMismatch, errors.ServiceError) as exc:
                problems.append(str(exc))
        raise errors.not_found(
            f"No running session can sample model package {target}: start a session on its "
            "base model with its LoRA rank, or name a session as the model."
            + (f" ({problems[0]})" if problems else ""),
            runtime=True,
        )

    def _sample_now(
        self, session: Session, weights: str | None, request: SampleRequest
    ) -> dict[str, Any]:
        """Run one sample request through the scheduler and wait for its result."""
        op = Operation(kind="sample", body={}, id=str(uuid.uuid4()))
        self._scheduler.submit(make_job(session, op, weights, request, request.prompt))
        op.done.wait()
        if op.status != COMPLETED or op.result is None:
            raise errors.validation(f"sampling failed: {op.error}")
        return op.result

    def chat_models(self) -> list[dict[str, Any]]:
        """``/v1/models``: the running sessions, then every model package, newest first."""
        with self._mutex:
            sessions = [s for s in self._sessions.values() if s.status in ACTIVE]
        rows = [
            {
                "id": s.name,
                "object": "model",
                "created": int(s.creation_time.timestamp()),
                "owned_by": "localsession",
            }
            for s in sessions
        ]
        for group in self.registry.groups():
            rows += [
                {
                    "id": p.arn,
                    "object": "model",
                    "created": int(p.created().timestamp()),
                    "owned_by": "localsession",
                }
                for p in self.registry.list(group)
            ]
        return rows

    def _sampling_weights(self, session: Session, arn: str | None) -> str | None:
        """Which weights a sampling op reads (docs/semantics.md#3): the ARN's package, else
        the session's ``loadWeightsForSampling`` package, else the base model (None)."""
        if not arn:
            return session.sampling_package
        try:
            return str(session.compatible_package(arn))
        except PackageMismatch as exc:
            raise errors.validation(str(exc)) from None
        except errors.ServiceError as exc:
            raise errors.not_found(exc.message, runtime=True) from None

    def _operation(self, name: str, operation_id: str) -> Operation:
        session = self._session(name, runtime=True)
        op = session.ops.get(operation_id)
        if op is None:
            raise errors.not_found(
                f"Operation {operation_id} does not exist in training session {name}.",
                runtime=True,
            )
        return op

    def get_training_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        if self.faults.armed:
            self.faults.on_request()
        return self._operation(name, operation_id).response()

    def get_sampling_operation_result(self, name: str, operation_id: str) -> dict[str, Any]:
        if self.faults.armed:
            self.faults.on_request()
        return self._operation(name, operation_id).response()

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool:
        """Block until an op is terminal or ``timeout`` passes; True if terminal."""
        op = self._operation(name, operation_id)
        return op.status in TERMINAL or op.done.wait(timeout)

    def on_operation_done(self, name: str, operation_id: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the op is terminal (at once if it is), from the finishing
        thread: the non-blocking form of :meth:`wait_operation`, for an event loop."""
        self._operation(name, operation_id).add_done_callback(callback)

    def backoff(self, seconds: float) -> None:
        """How an in-process client waits before retrying a throttled request: real time."""
        time.sleep(seconds)

    def get_tokenizer(self, name: str) -> Any:
        """The tokenizer of a session's model (in-process only; the wire has no such call)."""
        session = self._session(name, runtime=True)
        session.wait_until_started()
        if session.engine is None:
            raise errors.conflict(
                f"Training session {name} has no model loaded ({session.status})."
            )
        return session.engine.get_tokenizer()

    def reset(self, *, forget: bool = True) -> int:
        """Stop and forget every session (the server's admin reset); return how many.
        Model packages on disk are kept; so are session records when ``forget`` is False."""
        with self._mutex:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            if session.status in ACTIVE:
                session.stop()
        for session in sessions:
            session.join(timeout=10.0)
            if forget and self._store is not None:
                self._store.remove(session.name)
        return len(sessions)

    def close(self) -> None:
        """Stop every session and the scheduler (for tests and server shutdown); their
        records stay, as Stopped, for the next service on this home."""
        self.reset(forget=False)
        self._scheduler.close()


@dataclass
class PreparedChat:
    """A checked chat request, bound to the session and weights that will sample it."""

    request: chat.ChatRequest
    target: str
    session: Session
    weights: str | None
    tokenizer: Any
    prompt: list[int]


def _chat_text(tokenizer: Any, tokens: list[int], stop: tuple[str, ...]) -> str:
    """A completion's text: special tokens dropped, cut before the first stop string
    (OpenAI returns the text without the stop sequence; the tokens keep it)."""
    text = str(tokenizer.decode(tokens, skip_special_tokens=True))
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def _hub_name_of(model: str, catalog: ModelCatalog) -> str:
    """The ``BaseModel.HubContentName`` of a package: the model's Hub content name where that
    names the model back (so the SDK can rebuild a Hub ARN from it), else the model name."""
    name = hub_content_name(model)
    return name if catalog.canonical_name(name) == model else model


_default: Service | None = None
_default_lock = threading.Lock()


def default_service() -> Service:
    """The process-wide service the in-process clients share, configured from the env.

    In-process clients submit in sequence order synchronously, so the only gap they can leave
    is a number consumed by a request refused client-side; it is recorded lost at once
    (``gap_timeout=0``) instead of blocking the client's later ops.
    """
    global _default
    with _default_lock:
        if _default is None:
            _default = Service(ServiceConfig.from_env(gap_timeout=0.0))
            # Let running ops finish and engines close before the interpreter tears down.
            atexit.register(_default.close)
        return _default
