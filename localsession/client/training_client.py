"""``TrainingClient``: the SDK's training surface over a ``Backend``.

Inputs are coerced and validated in the caller's thread with the SDK's own code
(``_inputs``), sequence numbers are allocated from 1 under a re-entrant lock, and every op
returns the SDK's ``APIFuture`` at once, so ops pipeline freely. Ordering, failure and limits
are the runtime's; this layer holds no behaviour of its own beyond what the SDK does
client-side.

Length: one class, the SDK's ``TrainingClient``, is most of the file. ``tests/test_parity.py``
compares its MRO and every public method with the SDK's (nine of them the ``*_async`` twins
the SDK has), so it cannot be cut into mixins, and moving method bodies to helper modules
would leave each public method a one-line forward.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

from localsession import vocab
from localsession.client._handle import BackgroundSubmitter, _SessionHandle
from localsession.client._inputs import (
    _RETRY_CONFIG_CONSEQUENCE,
    _warn_unsupported_args,
    batch_to_datum_list,
    chunk_datum_list,
    combine_forward_backward_results,
)
from localsession.client._staged import CombinedFuture
from localsession.client._submit import operation_future, submit
from localsession.client.backend import call
from localsession.client.sampling_client import SamplingClient
from localsession.exceptions import TrainingSessionError
from localsession.futures import APIFuture
from localsession.ids import uuid4_text
from localsession.types import (
    AdamParams,
    ForwardBackwardOutput,
    LoadStateResponse,
    LossFunction,
    ModelPackageInfo,
    ModelPackageKind,
    OptimStepResponse,
    SaveStateResponse,
    SaveWeightsResponse,
    _OperationResult,
)

_log = logging.getLogger("localsession.client")

_R = TypeVar("_R", bound=_OperationResult)
#: The built-in losses' names: looked up without constructing the enum on every call.
_LOSS_NAMES = frozenset(member.value for member in LossFunction)

# What happens instead when a save argument the service does not honour is set.
_IGNORED_SAVE_ARGS = {
    "ttl_seconds": "the package is kept under the platform's retention policy instead",
    "name": "a package is named by its ARN; pass description=... for a readable label",
    "overwrite": "each save registers a new package version; earlier ones are kept",
}


def _warn_ignored_save_args(**given: Any) -> None:
    for arg, value in given.items():
        _warn_unsupported_args(_IGNORED_SAVE_ARGS[arg], **{arg: value})


class TrainingClient:
    """Runs training ops of one session, in call order, returning futures at once."""

    def __init__(
        self,
        training_session_name: str,
        runtime: Any,
        *,
        base_model: str = "",
        tokenizer: Any = None,
        hub_client: Any = None,
        hf_model_id: Optional[str] = None,
        model_package_group_arn: str = "",
        service_client: Any = None,
    ) -> None:
        self.training_session_name: str = training_session_name
        self._runtime, self._service_client = runtime, service_client
        self._base_model, self._tokenizer = base_model, tokenizer
        self._hub_client, self._hf_model_id = hub_client, hf_model_id
        self._model_package_group_arn = model_package_group_arn
        self._strict: bool = getattr(service_client, "_strict", True)
        # Sequence numbers start at 1; the re-entrant lock also spans a split batch's chunks.
        self._sequence_counter, self._sequence_lock = 0, threading.RLock()
        # A client token is this prefix and the op's number: unique per request, as a fresh
        # uuid4 per op would be, for a fraction of its cost (docs/wire.md#5)
        self._token_prefix = uuid4_text()
        self._submitter = BackgroundSubmitter(name=f"localsession-training-{training_session_name}")
        self._handle = _SessionHandle(training_session_name, service_client)  # auto-stop
        # The newest package of each kind this client saved (get_latest_model_package).
        self._latest_by_kind: Dict[ModelPackageKind, ModelPackageInfo] = dict()
        self._cache_lock = threading.Lock()  # guards _latest_by_kind

    def get_tokenizer(self) -> Any:
        """The session model's tokenizer (a ``transformers`` tokenizer), cached per client."""
        if self._tokenizer is None:  # loaded once, on first use
            self._tokenizer = self._runtime.in_process.get_tokenizer(self.training_session_name)
        loaded = self._tokenizer
        return loaded

    # -- training primitives ---------------------------------------------------------------

    def forward_backward(
        self,
        batch: Any,
        loss_fn: "LossFunction | str" = vocab.LossFunction.CROSS_ENTROPY.value,
        loss_fn_inputs: Optional[Dict[str, Any]] = None,
        loss_fn_config: Optional[Dict[str, float]] = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Compute the loss and accumulate gradients; returns a future at once."""
        return self._run_loss(
            vocab.OpKind.FORWARD_BACKWARD.value, batch, loss_fn, loss_fn_inputs, loss_fn_config
        )

    async def forward_backward_async(
        self,
        batch: Any,
        loss_fn: "LossFunction | str" = vocab.LossFunction.CROSS_ENTROPY.value,
        loss_fn_inputs: Optional[Dict[str, Any]] = None,
        loss_fn_config: Optional[Dict[str, float]] = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        pending = self.forward_backward(batch, loss_fn, loss_fn_inputs, loss_fn_config)
        return pending

    def forward(
        self,
        batch: Any,
        loss_fn: "LossFunction | str" = vocab.LossFunction.CROSS_ENTROPY.value,
        loss_fn_inputs: Optional[Dict[str, Any]] = None,
        loss_fn_config: Optional[Dict[str, float]] = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        """Compute the loss and per-token outputs without touching gradients."""
        return self._run_loss(
            vocab.OpKind.FORWARD.value, batch, loss_fn, loss_fn_inputs, loss_fn_config
        )

    async def forward_async(
        self,
        batch: Any,
        loss_fn: "LossFunction | str" = vocab.LossFunction.CROSS_ENTROPY.value,
        loss_fn_inputs: Optional[Dict[str, Any]] = None,
        loss_fn_config: Optional[Dict[str, float]] = None,
    ) -> APIFuture[ForwardBackwardOutput]:
        pending = self.forward(batch, loss_fn, loss_fn_inputs, loss_fn_config)
        return pending

    def _run_loss(
        self,
        kind: str,
        batch: Any,
        loss_fn: "LossFunction | str",
        loss_fn_inputs: Optional[Dict[str, Any]],
        loss_fn_config: Optional[Dict[str, float]],
    ) -> APIFuture[ForwardBackwardOutput]:
        known = type(loss_fn) is str and loss_fn in _LOSS_NAMES  # else the enum checks it
        loss = loss_fn if known else LossFunction(loss_fn).value
        datums = batch_to_datum_list(
            batch, self._tokenizer, loss_fn_inputs, self.get_tokenizer, loss_fn_name=loss
        )
        chunks = chunk_datum_list(datums) or [datums]
        extra = {} if loss_fn_config is None else {"lossFnConfig": loss_fn_config}

        def one(part: List[Dict[str, Any]]) -> APIFuture[ForwardBackwardOutput]:
            body = {"lossFnName": loss, "datumList": part, **extra}
            return self._submit({kind: body}, ForwardBackwardOutput)

        if len(chunks) < 2:
            return one(chunks[0])
        # Chunks of one forward_backward take contiguous sequence numbers (docs/wire.md#5).
        with self._sequence_lock:  # no other op may take a number in between
            parts = [one(part) for part in chunks]
        sizes = [len(part) for part in chunks]
        fold = functools.partial(combine_forward_backward_results, datum_counts=sizes)
        return CombinedFuture(parts, fold)

    def optim_step(
        self,
        adam_params: "Optional[AdamParams | Dict[str, Any] | Any]" = None,
    ) -> APIFuture[OptimStepResponse]:
        """Apply the accumulated gradients with AdamW and zero them."""
        chosen = AdamParams() if adam_params is None else AdamParams.from_any(adam_params)
        body = {"adamParamsConfig": chosen._to_api()}
        return self._submit({vocab.OpKind.OPTIMIZER_STEP.value: body}, OptimStepResponse)

    async def optim_step_async(
        self,
        adam_params: "Optional[AdamParams | Dict[str, Any] | Any]" = None,
    ) -> APIFuture[OptimStepResponse]:
        pending = self.optim_step(adam_params)
        return pending

    # -- checkpoints -----------------------------------------------------------------------

    def save_weights_for_sampler(
        self,
        description: str = "",
        merge_weights: bool = False,
        *,
        ttl_seconds: Optional[int] = None,
        name: Optional[str] = None,
    ) -> APIFuture[SaveWeightsResponse]:
        """Save the adapter as a MODEL package (``merge_weights`` adds a merged full model)."""
        _warn_ignored_save_args(ttl_seconds=ttl_seconds, name=name)
        config: Dict[str, Any] = {"mergeWeights": True} if merge_weights else {}
        config.update({"description": description} if description else {})
        remember = self._remembers(ModelPackageKind.MODEL)
        request = {vocab.OpKind.SAVE_WEIGHTS.value: config}
        return self._submit(request, SaveWeightsResponse, record_fn=remember)

    async def save_weights_for_sampler_async(
        self,
        description: str = "",
        merge_weights: bool = False,
        *,
        ttl_seconds: Optional[int] = None,
        name: Optional[str] = None,
    ) -> APIFuture[SaveWeightsResponse]:
        future = self.save_weights_for_sampler(
            description, merge_weights, ttl_seconds=ttl_seconds, name=name
        )
        return future  # as the SDK: the future, not its result

    def save_state(
        self,
        description: str = "",
        *,
        ttl_seconds: Optional[int] = None,
        overwrite: bool = False,
        name: Optional[str] = None,
    ) -> APIFuture[SaveStateResponse]:
        """Save adapter + optimizer state as a CHECKPOINT package, resumable later."""
        _warn_ignored_save_args(ttl_seconds=ttl_seconds, overwrite=overwrite or None, name=name)
        config = {"description": description} if description else {}
        remember = self._remembers(ModelPackageKind.CHECKPOINT)
        request = {vocab.OpKind.SAVE_STATE.value: config}
        return self._submit(request, SaveStateResponse, record_fn=remember)

    async def save_state_async(
        self,
        description: str = "",
        *,
        ttl_seconds: Optional[int] = None,
        overwrite: bool = False,
        name: Optional[str] = None,
    ) -> APIFuture[SaveStateResponse]:
        return self.save_state(description, ttl_seconds=ttl_seconds, overwrite=overwrite, name=name)

    def load_state(self, model_package_arn: str) -> APIFuture[LoadStateResponse]:
        """Restore the adapter weights from a package (the optimizer starts fresh)."""
        return self._load(model_package_arn, False)

    async def load_state_async(self, model_package_arn: str) -> APIFuture[LoadStateResponse]:
        pending = self.load_state(model_package_arn)
        return pending

    def load_state_with_optimizer(self, model_package_arn: str) -> APIFuture[LoadStateResponse]:
        """Restore the adapter weights and the AdamW state from a CHECKPOINT package."""
        return self._load(model_package_arn, True)

    async def load_state_with_optimizer_async(
        self,
        model_package_arn: str,
    ) -> APIFuture[LoadStateResponse]:
        pending = self.load_state_with_optimizer(model_package_arn)
        return pending

    def _load(self, arn: str, with_optimizer: bool) -> APIFuture[LoadStateResponse]:
        config = {"modelPackageArn": arn, "loadOptimizer": with_optimizer}
        return self._submit({vocab.OpKind.LOAD_STATE.value: config}, LoadStateResponse)

    def list_model_packages(
        self,
        *,
        kind: "Optional[ModelPackageKind]" = None,
        max_results: Optional[int] = None,
    ) -> List[ModelPackageInfo]:
        """Packages of this session's group, newest first (via the ServiceClient)."""
        options = {"kind": kind, "max_results": max_results}
        chosen = {key: v for key, v in options.items() if v is not None}
        service = self._require_service_client()
        listed: List[ModelPackageInfo] = service.list_model_packages(
            model_package_group_arn=self._require_group(), **chosen
        )
        return listed

    def get_latest_model_package(self, kind: ModelPackageKind) -> Optional[ModelPackageInfo]:
        """The newest package of ``kind`` this client saved (answered locally, as the SDK does)."""
        with self._cache_lock:  # a save may be recording one right now
            latest = self._latest_by_kind.get(kind)
        return latest

    def _remembers(self, kind: ModelPackageKind) -> Callable[[Any], None]:
        """A hook that records a save's package as the latest of ``kind``."""

        def note(saved: Any) -> None:
            if saved.model_package_arn:
                info = ModelPackageInfo(model_package_arn=saved.model_package_arn, kind=kind)
                with self._cache_lock:  # parse runs on whichever thread resolves the future
                    self._latest_by_kind[kind] = info

        return note

    def _require_group(self) -> str:
        group = self._model_package_group_arn
        if group:
            return group
        problem = (
            "This client has no model package group associated, so checkpoints cannot be "
            "listed. Use ServiceClient.list_model_packages(...) with an explicit "
            "model_package_group_arn instead."
        )
        raise ValueError(problem)

    def _require_service_client(self) -> Any:
        owner = self._service_client
        if owner is not None:
            return owner
        problem = (
            "This client was not created by a ServiceClient, so checkpoint lookups are "
            "unavailable. Use ServiceClient.list_model_packages(...) directly."
        )
        raise ValueError(problem)

    def _submit(
        self,
        operation_config: Dict[str, Any],
        result_cls: Type[_R],
        *,
        record_fn: Optional[Callable[[_R], None]] = None,
    ) -> APIFuture[_R]:
        def parse(body: Dict[str, Any]) -> _R:
            parsed: _R = result_cls._from_api(body.get("operationResult", {}))
            if record_fn is not None:  # e.g. remember the package a save registered
                record_fn(parsed)
            return parsed

        with self._sequence_lock:  # numbers are taken and submitted in one order
            self._sequence_counter = number = self._sequence_counter + 1
            request = {
                "sequenceNumber": number,
                "clientToken": f"{self._token_prefix}-{number}",
                "operationConfig": operation_config,
            }
            name, op = self.training_session_name, "ExecuteTrainingOperation"
            return submit(
                self._submitter,
                self._runtime,
                name,
                op,
                request,
                parse,
                strict=self._strict,
                keepalive=self._handle,
            )

    @property
    def current_sequence_number(self) -> int:
        """The last sequence number allocated; 0 before any op."""
        last: int = self._sequence_counter
        return last

    # -- sampling clients ------------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self,
        description: str = "",
        merge_weights: bool = False,
        *,
        name: Optional[str] = None,
        retry_config: Optional[Any] = None,
    ) -> SamplingClient:
        """Save the weights (blocking), point this session's samplers at them, return one."""
        saved = self.save_weights_for_sampler(description, merge_weights, name=name).result()
        arn = saved.model_package_arn
        if arn:
            self._load_weights_for_sampling(arn)
            return self.create_sampling_client(arn, retry_config=retry_config)
        problem = (
            "The weights were saved but the service returned no checkpoint ARN, so there is "
            "nothing to sample from. Retry the save, or call save_weights_for_sampler() and "
            "inspect its result."
        )
        raise TrainingSessionError(problem)

    async def save_weights_and_get_sampling_client_async(
        self,
        description: str = "",
        merge_weights: bool = False,
        *,
        name: Optional[str] = None,
        retry_config: Optional[Any] = None,
    ) -> SamplingClient:
        make = functools.partial(
            self.save_weights_and_get_sampling_client, name=name, retry_config=retry_config
        )
        return await asyncio.to_thread(make, description, merge_weights)

    def _load_weights_for_sampling(self, model_package_arn: str) -> LoadStateResponse:
        """ExecuteSamplingOperation{loadWeightsForSampling}, sent from the caller's thread."""
        config = {
            vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING.value: {"modelPackageArn": model_package_arn}
        }
        response = call(
            "ExecuteSamplingOperation",
            lambda: self._runtime.execute_sampling_operation(
                self.training_session_name, {"operationConfig": config}
            ),
        )
        return operation_future(
            self._runtime,
            self.training_session_name,
            "ExecuteSamplingOperation",
            response["operationId"],
            lambda r: LoadStateResponse._from_api(r.get("operationResult", {})),
        ).result()

    def create_sampling_client(
        self, model_package_arn: str = "", *, retry_config: Optional[Any] = None
    ) -> SamplingClient:
        """A sampling client on this session; ``""`` samples without a package ARN."""
        _warn_unsupported_args(_RETRY_CONFIG_CONSEQUENCE, retry_config=retry_config)  # ignored
        return SamplingClient(  # shares this client's session, handle and submitter
            training_session_name=self.training_session_name,
            runtime=self._runtime,
            model_package_arn=model_package_arn,
            base_model=self._base_model,
            tokenizer=self._tokenizer,
            hub_client=self._hub_client,
            hf_model_id=self._hf_model_id,
            service_client=self._service_client,
            session_handle=self._handle,
            submitter=self._submitter,
        )

    async def create_sampling_client_async(
        self, model_package_arn: str = "", *, retry_config: Optional[Any] = None
    ) -> SamplingClient:
        make = functools.partial(self.create_sampling_client, retry_config=retry_config)
        return await asyncio.to_thread(make, model_package_arn)

    # -- lifecycle -------------------------------------------------------------------------

    def _lifecycle_owner(self) -> Any:
        owner = self._service_client
        if owner is not None:
            return owner
        problem = (
            "This client was not created by a ServiceClient, so it cannot stop or delete the "
            "session. Use ServiceClient.stop_session(name) or ServiceClient.delete_session(name) "
            "instead."
        )
        raise ValueError(problem)

    def stop(self) -> None:
        """Close this client and stop its session (idempotent on the service side)."""
        self._submitter.close()  # no new ops; queued submits still go out
        owner = self._lifecycle_owner()
        try:
            owner.stop_session(self.training_session_name)
        except BaseException:  # the finalizer still tries later, without the warning
            self._handle.note_explicit_stop_failed()  # remembered for the finalizer
            raise
        self._handle.disarm()  # stopped: nothing left for the finalizer

    def delete(self, *, stop_if_active: bool = False) -> None:
        """Close this client and delete its session."""
        self._submitter.close()  # no new ops; queued submits still go out
        owner = self._lifecycle_owner()
        owner.delete_session(self.training_session_name, stop_if_active=stop_if_active)
        self._handle.disarm()  # deleted: nothing left for the finalizer

    def __enter__(self) -> "TrainingClient":
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - leaving the block must not raise over the body
            _log.warning(
                "Failed to stop session %r on exit; it will be stopped when this client is "
                "collected, or after its inactivity timeout.",
                self.training_session_name,
                exc_info=True,
            )
