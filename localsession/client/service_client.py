"""``ServiceClient``: the SDK's entry point, in-process.

Same constructor and methods as ``sagemaker.train.training_session.ServiceClient``. Cloud-only
arguments (role, S3 path, KMS key, VPC, pool size) are accepted, recorded on the session as
the real service would, and logged at debug level. Two keyword-only extensions, both optional:

- ``strict`` (default True): enforce the service's limits; ``strict=False`` lifts them for fast
  local experiments (docs/semantics.md#4), e.g. ``max_tokens`` below 512.
- ``backend``: the ``Backend`` to talk to; default the process-wide in-process service.

Length: one class, the SDK's ``ServiceClient``, is most of the file. ``tests/test_parity.py``
compares its MRO and every public method with the SDK's, so it cannot be cut into mixins; its
two halves (model packages, sessions) share the client's settings and backend, and moving
their bodies to helper modules would leave each public method a one-line forward.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any, Dict, List, Optional

from botocore.exceptions import ClientError

from localsession import vocab
from localsession.client._inputs import _RETRY_CONFIG_CONSEQUENCE, _warn_unsupported_args
from localsession.client.backend import CONTROL_PLANE, Backend, check_params, control
from localsession.client.sampling_client import SamplingClient
from localsession.client.training_client import TrainingClient
from localsession.types import (
    DEFAULT_LORA_ALPHA,
    DEFAULT_LORA_RANK,
    ModelPackageDeletion,
    ModelPackageInfo,
    ModelPackageKind,
    SessionStatus,
    TrainingSessionSummary,
    VpcConfig,
)

_log = logging.getLogger("localsession.client")

DEFAULT_MODEL_PACKAGE_GROUP_NAME = vocab.DEFAULT_GROUP
DEFAULT_SESSION_NAME_PREFIX = "sagemaker-training-session"

# A session in one of these will never become Running.
_WONT_RUN = (
    vocab.SessionStatus.FAILED,
    vocab.SessionStatus.STOPPED,
    vocab.SessionStatus.STOPPING,
    vocab.SessionStatus.BLOCKED,
)
# Stopping a session in one of these is refused, and there is nothing left to stop.
_ALREADY_STOPPED = (
    vocab.SessionStatus.STOPPING,
    vocab.SessionStatus.STOPPED,
    vocab.SessionStatus.FAILED,
    vocab.SessionStatus.DELETING,
    vocab.SessionStatus.DELETION_FAILED,
)
_SESSION_WAIT_SECONDS = 600
_MAX_RESULTS_PER_PAGE = 100
_UNSUPPORTED_CONSEQUENCE = "the session was created without it"
_DEFAULT_LIST_LIMIT = 10
_DEFAULT_SCAN_LIMIT = 20


def _session_name_of(session: str) -> str:
    """A session name from a name or a session ARN."""
    return session.split("/")[-1] if session.startswith("arn:") else session


def _error_code(error: ClientError) -> str:
    return str((error.response.get("Error") or {}).get("Code") or "")


def _stop_already_done(error: ClientError) -> bool:
    """A stop refused because the session is already past stopping."""
    text = str((error.response.get("Error") or {}).get("Message") or "")
    refused = _error_code(error) == vocab.ErrorCode.VALIDATION
    phrases = (f"invalid session state transition from {state} to " for state in _ALREADY_STOPPED)
    return refused and any(phrase in text for phrase in phrases)


def _pages(
    operation: str,
    request: Dict[str, Any],
    send: Callable[[Dict[str, Any]], Dict[str, Any]],
    items: str,
    limit: Optional[int],
) -> List[Any]:
    """Every item of a paginated List* call, at most ``limit`` of them (None: all)."""
    found: List[Any] = []
    token: Optional[str] = None
    while limit is None or len(found) < limit:
        page = dict(request)
        if token:
            page["NextToken"] = token
        if limit is not None:
            page["MaxResults"] = min(limit - len(found), _MAX_RESULTS_PER_PAGE)
        answer = control(operation, page, send)
        found += answer.get(items, [])
        token = answer.get("NextToken")
        if not token:
            break
    return found if limit is None else found[:limit]


def _region_or_refuse(region: Optional[str]) -> str:
    """The region as the SDK finds it: the argument, ``AWS_REGION``, then boto3's chain
    (``AWS_DEFAULT_REGION``, the profile's config). None anywhere is the SDK's ValueError."""
    if not region:
        import boto3

        region = os.environ.get("AWS_REGION") or boto3.Session().region_name
    if region:
        return region
    problem = (
        "No AWS Region configured. Pass region= to the client, or set up a local AWS "
        "configuration with a Region that offers training sessions (AWS_REGION, "
        "AWS_DEFAULT_REGION, or the region of your AWS profile)."
    )
    raise ValueError(problem)


class ServiceClient:
    """Opens LoRA training sessions on local models and manages them."""

    def __init__(
        self,
        region: Optional[str] = None,
        *,
        role_arn: str,
        model_package_group_arn: Optional[str] = None,
        s3_output_path: Optional[str] = None,
        kms_key_arn: Optional[str] = None,
        vpc_config: "Optional[VpcConfig | dict[str, Any]]" = None,
        session_name_prefix: Optional[str] = None,
        max_pool_connections: Optional[int] = None,
        strict: bool = True,
        backend: Optional[Backend] = None,
    ) -> None:
        if backend is None:
            from localsession.wiring import default_service

            backend = default_service()
        self._backend: Backend = backend
        self._strict = strict
        self._region = _region_or_refuse(region)
        self._role_arn = role_arn
        self._model_package_group_arn = model_package_group_arn
        self._s3_output_path = s3_output_path
        self._kms_key_arn = kms_key_arn
        self._vpc_config = None if vpc_config is None else VpcConfig.from_any(vpc_config)
        self._session_name_prefix = session_name_prefix
        _log.debug(
            "localsession runs locally; cloud-only settings are recorded, not used: "
            "role_arn=%r s3_output_path=%r kms_key_arn=%r vpc_config=%r max_pool_connections=%r",
            role_arn,
            s3_output_path,
            kms_key_arn,
            vpc_config,
            max_pool_connections,
        )

    # -- model packages --------------------------------------------------------------------

    def _group(self, model_package_group_arn: Optional[str]) -> str:
        chosen = model_package_group_arn or self._model_package_group_arn
        if chosen:
            return chosen
        problem = "No model_package_group_arn provided and none set on ServiceClient."
        raise ValueError(problem)

    def _package_summaries(self, group: str, max_results: Optional[int]) -> List[Dict[str, Any]]:
        newest_first = {
            "ModelPackageGroupName": group,
            "SortBy": "CreationTime",
            "SortOrder": "Descending",
        }
        send = self._backend.list_model_packages
        key = "ModelPackageSummaryList"
        return _pages("ListModelPackages", newest_first, send, key, max_results)

    def _describe_package(self, model_package_arn: str) -> Dict[str, Any]:
        return control(
            "DescribeModelPackage",
            {"ModelPackageName": model_package_arn},
            self._backend.describe_model_package,
        )

    def _container(self, model_package_arn: str) -> Dict[str, Any]:
        """``InferenceSpecification.Containers[0]`` of a package (``{}`` if absent)."""
        spec = self._describe_package(model_package_arn).get("InferenceSpecification") or {}
        containers = spec.get("Containers") or [{}]
        return containers[0] or {}

    def _package_kind(self, model_package_arn: str) -> ModelPackageKind:
        checkpoint = bool(self._container(model_package_arn).get("IsCheckpoint"))
        return ModelPackageKind.CHECKPOINT if checkpoint else ModelPackageKind.MODEL

    def list_model_packages(
        self,
        *,
        kind: Optional[ModelPackageKind] = None,
        model_package_group_arn: Optional[str] = None,
        max_results: Optional[int] = _DEFAULT_LIST_LIMIT,
    ) -> List[ModelPackageInfo]:
        """Packages of a group, newest first; ``kind`` filters (so fewer may come back)."""
        listed = self._package_summaries(self._group(model_package_group_arn), max_results)
        infos = [ModelPackageInfo._from_summary(entry) for entry in listed]
        if kind is not None:  # the kind needs a describe per package
            for info in infos:
                info.kind = self._package_kind(info.model_package_arn)
            infos = [info for info in infos if info.kind == kind]
        return infos

    def get_latest_model_package(
        self,
        kind: ModelPackageKind,
        *,
        model_package_group_arn: Optional[str] = None,
        scan_limit: int = _DEFAULT_SCAN_LIMIT,
    ) -> Optional[ModelPackageInfo]:
        """The newest package of ``kind`` among the ``scan_limit`` newest of the group."""
        group = self._group(model_package_group_arn)
        recent = self._package_summaries(group, scan_limit)
        for entry in recent:
            found = ModelPackageInfo._from_summary(entry)
            found.kind = self._package_kind(found.model_package_arn)
            if found.kind == kind:
                return found
        if len(recent) >= scan_limit:
            _log.warning(
                "No %s package found in the %d most recent versions of group %s, but the group "
                "has more; retry with a larger scan_limit.",
                kind.value,
                len(recent),
                group,
            )
        return None

    def delete_model_package(
        self,
        model_package_arn: str,
        *,
        delete_artifacts: bool = False,
    ) -> ModelPackageDeletion:
        """Delete a package; its files too with ``delete_artifacts`` (else they are kept)."""
        drop = self._backend.delete_model_package
        send = functools.partial(drop, delete_artifacts=delete_artifacts)
        request = {"ModelPackageName": model_package_arn}
        try:
            answer = control("DeleteModelPackage", request, send)
        except ClientError as refusal:
            if _error_code(refusal) in vocab.NOT_FOUND_CODES:
                gone = "the model package does not exist"
                return ModelPackageDeletion(  # already gone: nothing deleted, nothing kept
                    model_package_arn=model_package_arn,
                    model_package_deleted=False,
                    retained_reason=gone,
                )
            raise
        kept_at = answer.get("RetainedAt")
        return ModelPackageDeletion(  # deleted now
            model_package_arn=model_package_arn,
            model_package_deleted=True,
            s3_uri=answer.get("S3Uri") or kept_at,  # where the artifacts are (were), in S3 terms
            objects_deleted=int(answer.get("ObjectsDeleted") or 0),
            artifacts_retained=kept_at is not None,
            retained_reason=None if not kept_at else "delete_artifacts was not set",
        )

    def _base_model_of(self, model_package_arn: str) -> str:
        name = (self._container(model_package_arn).get("BaseModel") or {}).get("HubContentName")
        if not name:
            problem = (
                f"Model package {model_package_arn!r} carries no base-model reference "
                "(InferenceSpecification.Containers[0].BaseModel)."
            )
            raise ValueError(problem)
        return str(name)

    def create_training_client_from_state(
        self, model_package_arn: str, **kwargs: Any
    ) -> TrainingClient:
        """A new session with the package's adapter loaded (the optimizer starts fresh)."""
        return self._client_from_state(model_package_arn, load_optimizer=False, kwargs=kwargs)

    async def create_training_client_from_state_async(
        self, model_package_arn: str, **kwargs: Any
    ) -> TrainingClient:
        make = functools.partial(self.create_training_client_from_state, **kwargs)
        return await asyncio.to_thread(make, model_package_arn)

    def create_training_client_from_state_with_optimizer(
        self, model_package_arn: str, **kwargs: Any
    ) -> TrainingClient:
        """A new session resuming a CHECKPOINT exactly: adapter and AdamW state."""
        return self._client_from_state(model_package_arn, load_optimizer=True, kwargs=kwargs)

    async def create_training_client_from_state_with_optimizer_async(
        self, model_package_arn: str, **kwargs: Any
    ) -> TrainingClient:
        make = functools.partial(self.create_training_client_from_state_with_optimizer, **kwargs)
        return await asyncio.to_thread(make, model_package_arn)

    def _client_from_state(
        self, package: str, *, load_optimizer: bool, kwargs: Dict[str, Any]
    ) -> TrainingClient:
        options = dict(kwargs)
        if "base_model" not in options:
            options["base_model"] = self._base_model_of(package)
        tc = self.create_lora_training_client(**options)
        load = tc.load_state_with_optimizer if load_optimizer else tc.load_state
        try:
            load(package).result()
        except BaseException:  # stop what was started, then re-raise
            try:
                tc.stop()
            except Exception:  # noqa: BLE001 - the load error matters more
                _log.warning("Could not stop training session %r", tc.training_session_name)
            raise
        return tc

    # -- models and sessions ---------------------------------------------------------------

    def list_base_models(self) -> List[str]:
        """Models a session can start on: the built-in ones first, then mapped and cached."""
        return self._backend.in_process.list_base_models()

    def create_lora_training_client(
        self,
        base_model: str,
        *,
        rank: int = DEFAULT_LORA_RANK,
        alpha: int = DEFAULT_LORA_ALPHA,
        training_session_name: Optional[str] = None,
        model_package_group_arn: Optional[str] = None,
        s3_output_path: Optional[str] = None,
        kms_key_arn: Optional[str] = None,
        vpc_config: "Optional[VpcConfig | dict[str, Any]]" = None,
        seed: Optional[int] = None,
        train_mlp: Optional[bool] = None,
        train_attn: Optional[bool] = None,
        train_unembed: Optional[bool] = None,
        user_metadata: Optional[Dict[str, str]] = None,
    ) -> TrainingClient:
        """Start a session with a fresh LoRA adapter on ``base_model``; blocks until Running."""
        _warn_unsupported_args(
            _UNSUPPORTED_CONSEQUENCE,
            seed=seed,
            train_mlp=train_mlp,
            train_attn=train_attn,
            train_unembed=train_unembed,
            user_metadata=user_metadata,
        )
        name = training_session_name or self._generate_session_name()
        group = self._create_session(
            name,
            base_model,
            rank=rank,
            alpha=alpha,
            model_package_group_arn=model_package_group_arn,
            s3_output_path=s3_output_path,
            kms_key_arn=kms_key_arn,
            vpc_config=VpcConfig.from_any(vpc_config) if vpc_config is not None else None,
        )
        return TrainingClient(  # the session is Running
            training_session_name=name,
            runtime=self._backend,
            base_model=base_model,
            model_package_group_arn=group,
            service_client=self,
        )

    async def create_lora_training_client_async(
        self, base_model: str, **kwargs: Any
    ) -> TrainingClient:
        make = functools.partial(self.create_lora_training_client, **kwargs)
        return await asyncio.to_thread(make, base_model)

    def create_sampling_client(
        self,
        *,
        base_model: Optional[str] = None,
        model_package_arn: Optional[str] = None,
        retry_config: Optional[Any] = None,
    ) -> SamplingClient:
        """A sampling client on a new session it owns (its ``stop()`` stops the session)."""
        _warn_unsupported_args(_RETRY_CONFIG_CONSEQUENCE, retry_config=retry_config)
        if bool(base_model) == bool(model_package_arn):
            raise ValueError("Specify exactly one of base_model or model_package_arn.")
        if model_package_arn:
            # Per-request ARN, no loadWeightsForSampling (docs/wire.md#3); like the SDK, the session
            # is rank 32, alpha 64 whatever the package's (the engine samples it with its own).
            base_model = self._base_model_of(model_package_arn)
        name = self._generate_session_name()
        assert base_model is not None
        self._create_session(name, base_model, rank=DEFAULT_LORA_RANK, alpha=DEFAULT_LORA_ALPHA)
        return SamplingClient(
            training_session_name=name,
            runtime=self._backend,
            model_package_arn=model_package_arn or "",
            base_model=base_model,
            service_client=self,
        )

    async def create_sampling_client_async(self, **kwargs: Any) -> SamplingClient:
        make = functools.partial(self.create_sampling_client, **kwargs)
        return await asyncio.to_thread(make)

    def _create_session(
        self,
        name: str,
        base_model: str,
        *,
        rank: int,
        alpha: int,
        model_package_group_arn: Optional[str] = None,
        s3_output_path: Optional[str] = None,
        kms_key_arn: Optional[str] = None,
        vpc_config: Optional[VpcConfig] = None,
    ) -> str:
        """CreateTrainingSession, then wait for Running (stopping the session on failure)."""
        group = (
            model_package_group_arn
            or self._model_package_group_arn
            or f"arn:aws:sagemaker:{self._region}:000000000000:model-package-group/"
            f"{DEFAULT_MODEL_PACKAGE_GROUP_NAME}"
        )
        s3_location: Dict[str, Any] = {
            "Path": s3_output_path or self._s3_output_path or f"s3://localsession/{name}/output"
        }
        if kms_key_arn or self._kms_key_arn:
            s3_location["KmsKeyArn"] = kms_key_arn or self._kms_key_arn
        request: Dict[str, Any] = {
            "TrainingSessionName": name,
            "ModelPackageGroupArn": group,
            "LoraConfig": {"Rank": rank, "Alpha": alpha},
            "RoleArn": self._role_arn,
            "ModelConfig": {"BaseModelArn": base_model},
            "OutputConfig": {"S3Location": s3_location},
        }
        vpc = vpc_config or self._vpc_config
        if vpc is not None:
            request["VpcConfig"] = vpc._to_api()
        if base_model.startswith("arn:"):  # the SDK sends an ARN on unresolved: checks come first
            check_params("CreateTrainingSession", request, CONTROL_PLANE)
        # Like the SDK's Hub lookup of a name: an unknown model is a ValueError at the call site.
        self._backend.in_process.resolve_base_model(base_model)
        control(
            "CreateTrainingSession",
            request,
            functools.partial(
                self._backend.create_training_session, strict=self._strict, region=self._region
            ),
        )
        try:
            self._wait_until_running(name)
        except BaseException:  # stop what was started, then re-raise
            try:
                self._stop_session_if_active(name)
            except Exception:  # noqa: BLE001 - the original error matters more
                _log.warning("Could not stop training session %r after it failed to start", name)
            raise
        return group

    def _wait_until_running(self, name: str) -> None:
        status = self._backend.in_process.wait_for_session(name, _SESSION_WAIT_SECONDS)
        if status == vocab.SessionStatus.RUNNING:
            return
        detail = control(
            "DescribeTrainingSession",
            {"TrainingSessionName": name},
            self._backend.describe_training_session,
        )["TrainingSessionDetail"]
        status = detail["TrainingSessionStatus"]
        if status == vocab.SessionStatus.RUNNING:
            return
        if status in _WONT_RUN:
            reason = detail.get("ErrorDetails") or detail.get("ErrorMessage")
            suffix = f" ({reason})" if reason else ""
            raise RuntimeError(f"Session {name!r} entered terminal state: {status}{suffix}")
        limit = _SESSION_WAIT_SECONDS
        raise TimeoutError(f"Session {name!r} did not reach Running within {limit}s")

    def _generate_session_name(self) -> str:
        prefix = self._session_name_prefix or DEFAULT_SESSION_NAME_PREFIX
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def list_sessions(
        self,
        *,
        name_contains: Optional[str] = None,
        status_equals: "Optional[str | SessionStatus]" = None,
        max_results: Optional[int] = None,
    ) -> "list[TrainingSessionSummary]":
        """Sessions of this service, newest first (auto-paginated)."""
        status = getattr(status_equals, "value", status_equals)
        wanted = {"NameContains": name_contains, "StatusEquals": status}
        request = {key: v for key, v in wanted.items() if v is not None}
        send = self._backend.list_training_sessions
        key = "TrainingSessionSummaries"
        found = _pages("ListTrainingSessions", request, send, key, max_results)
        return [TrainingSessionSummary._from_summary(entry) for entry in found]

    def stop_session(self, training_session: str) -> None:
        """Stop a session by name or ARN; stopping a stopped session is a no-op."""
        name = _session_name_of(training_session)
        self._stop_session_if_active(name)

    def _stop_session_if_active(self, training_session_name: str) -> bool:
        request = {"TrainingSessionName": training_session_name}
        try:
            control("StopTrainingSession", request, self._backend.stop_training_session)
        except ClientError as refusal:
            if _stop_already_done(refusal):
                return False  # already stopped (or stopping): nothing to do
            raise
        return True

    def delete_session(self, training_session: str, *, stop_if_active: bool = False) -> None:
        """Delete a stopped session (stopping it first with ``stop_if_active``)."""
        name = _session_name_of(training_session)
        if stop_if_active:  # else deleting an active session is refused
            self._stop_session_if_active(name)
        control(
            "DeleteTrainingSession",
            {"TrainingSessionName": name},
            self._backend.delete_training_session,
        )
