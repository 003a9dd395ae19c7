"""The ``Backend`` seam: the one place a front end plugs into the service.

Clients call a Backend with the service's operations in wire shapes, and reach what only an
in-process service has (waits, completion callbacks, tokenizers, backoff) through its one
named extension, ``backend.in_process``. ``runtime.Service`` implements both, and the fakes
wrap that same Service with their own engine. Nothing else is substitutable, as with httpx's
transport.

This module also holds the two pieces of botocore behaviour the SDK's callers observe:
client-side parameter validation against the runtime's service model (``ParamValidationError``
for, e.g., ``maxTokens`` below 512) and service refusals surfacing as ``ClientError``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from localsession.client import param_check_fast
from localsession.runtime.errors import ServiceError

_R = TypeVar("_R")


class InProcessExtension(Protocol):
    """What only an in-process backend answers: the wire has no such calls.

    A remote caller polls ``DescribeTrainingSession`` and ``Get*OperationResult``, sleeps
    between retries, lists the Hub and loads the tokenizer itself; in-process, the clients
    ask the service directly. ``Service`` and ``FakeService`` provide these (the fakes' clock
    decides when an op is done and makes backoff instant).
    """

    def wait_for_session(self, name: str, timeout: float | None = None) -> str:
        """Block until a new session leaves Created; its status then."""
        ...

    def list_base_models(self) -> list[str]: ...
    def resolve_base_model(self, name: str) -> None:
        """Raise ``ValueError`` (listing the available models) if ``name`` cannot be loaded."""
        ...

    def wait_operation(self, name: str, operation_id: str, timeout: float | None) -> bool: ...
    def on_operation_done(
        self, name: str, operation_id: str, callback: Callable[[], None]
    ) -> None: ...
    def run_here(self, name: str, operation_id: str) -> bool:
        """Run a queued training op on the calling thread if it may run there, else
        return at once (the caller then waits as usual); True if the op has finished."""
        ...

    def get_tokenizer(self, name: str) -> Any: ...
    def backoff(self, seconds: float) -> None:
        """Wait before a client retries a throttled or 5xx-refused request."""
        ...


class Backend(Protocol):
    """The service's operations, in-process, plus its :class:`InProcessExtension`.

    Requests and responses are wire-shaped dicts; the keyword arguments (``strict``,
    ``region``, ``delete_artifacts``) carry what a remote caller states elsewhere (the
    server's flags, the SigV4 scope, the SDK's S3 step).
    """

    # control plane
    def create_training_session(
        self, request: dict[str, Any], *, strict: bool | None = None, region: str | None = None
    ) -> dict[str, Any]: ...
    def describe_training_session(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def list_training_sessions(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def stop_training_session(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def delete_training_session(self, request: dict[str, Any]) -> dict[str, Any]: ...
    # model registry
    def list_model_packages(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def describe_model_package(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def delete_model_package(
        self, request: dict[str, Any], *, delete_artifacts: bool = False
    ) -> dict[str, Any]: ...
    # runtime
    def execute_training_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]: ...
    def get_training_operation_result(self, name: str, operation_id: str) -> dict[str, Any]: ...
    def execute_sampling_operation(self, name: str, request: dict[str, Any]) -> dict[str, Any]: ...
    def get_sampling_operation_result(self, name: str, operation_id: str) -> dict[str, Any]: ...

    @property
    def in_process(self) -> InProcessExtension:
        """The calls only an in-process backend has (waits, callbacks, tokenizers, models)."""
        ...


def call(operation_name: str, fn: Callable[[], _R]) -> _R:
    """Run a backend call, re-raising a service refusal as botocore would: a ``ClientError``
    of the service's modelled class for the code (``ValidationException``, ...)."""
    try:
        return fn()
    except ServiceError as exc:
        runtime = operation_name in _runtime_model().operation_names
        error_class = _exceptions(RUNTIME if runtime else CONTROL_PLANE).from_code(exc.code)
        raise error_class(
            {
                "Error": {"Code": exc.code, "Message": exc.message},
                "ResponseMetadata": {"HTTPStatusCode": exc.http_status},
            },
            operation_name,
        ) from None


RUNTIME, CONTROL_PLANE = "sagemakertrainingsessionruntime", "sagemaker"


def _service_model(service: str) -> Any:
    # One loaded model per process, shared with the runtime's member table.
    from localsession.runtime.members import service_model

    return service_model(service)


def _runtime_model() -> Any:
    return _service_model(RUNTIME)


@functools.lru_cache(maxsize=2)
def _exceptions(service: str) -> Any:
    """botocore's per-service exception classes (``client.exceptions``), without a client."""
    from botocore.errorfactory import ClientExceptionsFactory

    return ClientExceptionsFactory().create_client_exceptions(_service_model(service))


def checked_copy(operation_name: str, params: dict[str, Any], service: str = RUNTIME) -> Any:
    """``params`` checked as botocore checks them before sending (:func:`check_params`), and
    copied as the wire delivers them (client/param_check.py). The usual request is proven
    valid and copied in one pass (client/param_check_fast.py)."""
    return param_check_fast.checked_copy(params, _input_shape(operation_name, service))


def check_params(operation_name: str, params: dict[str, Any], service: str = RUNTIME) -> None:
    """Validate a request as botocore does before sending it (docs/wire.md#5).

    Raises ``ParamValidationError`` for what the real SDK's client rejects before any request:
    unknown or missing members, wrong types, and values outside a modelled range or length.
    """
    param_check_fast.check(params, _input_shape(operation_name, service))


@functools.lru_cache(maxsize=32)
def _input_shape(operation_name: str, service: str) -> Any:
    return _service_model(service).operation_model(operation_name).input_shape


def control(operation_name: str, request: dict[str, Any], send: Callable[..., _R]) -> _R:
    """A control-plane call as the SDK's boto3 client makes it: checked against botocore's
    ``sagemaker`` model first (``ParamValidationError``), then sent (refusals as
    ``ClientError``)."""
    check_params(operation_name, request, CONTROL_PLANE)
    return call(operation_name, lambda: send(request))
