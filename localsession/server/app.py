"""The HTTP routes: the control plane, the runtime and the admin namespace over one Service.

A thin layer: each route parses the request, calls the runtime's operation of the same name
and serialises what comes back. Every behaviour (validation, ordering, limits, errors) is the
runtime's, shared with the in-process clients. The only thing done here is the long-poll of
``Get*OperationResult`` and of a starting session's ``DescribeTrainingSession``, which turns
the SDK's fixed 2 s poll and 10 s status wait into near-zero latency (docs/wire.md#4).

Nothing that can block runs on the event loop: every runtime call (which takes locks, and
may write a session record with ``fsync``) goes to the thread pool; only the long-poll's
wait is awaited on the loop. Calls that mint ARNs name the caller's region, read from the
request's SigV4 credential scope (the region the client signs for).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service
from localsession.server import admin, auth, chat_routes, s3, tinker, wire

#: Control-plane operations served on ``POST /`` (``X-Amz-Target: SageMaker.<Op>``).
CONTROL_PLANE = (
    "CreateTrainingSession",
    "DescribeTrainingSession",
    "ListTrainingSessions",
    "StopTrainingSession",
    "DeleteTrainingSession",
    "CreateModelPackageGroup",
    "DescribeModelPackageGroup",
    "ListModelPackages",
    "DescribeModelPackage",
    "DeleteModelPackage",
    "ListHubContents",
    "DescribeHubContent",
)
#: Bodies up to this size are accepted (the SDK's forwardBackward bodies reach tens of MB);
#: auth.RequestGuard enforces it on every route, also while a body streams in.
MAX_BODY_BYTES = auth.MAX_BODY_BYTES
_LABEL_RE = re.compile(r"^[a-zA-Z0-9-]{1,64}\Z")
#: How long a Describe of a session still loading its model is held (the SDK reads for 60 s).
START_WAIT_SECONDS = 30.0
#: Operations that mint ARNs: they take the caller's region (``region=``).
REGIONAL = ("CreateTrainingSession", "CreateModelPackageGroup")


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


async def _read_json(request: Request) -> dict[str, Any]:
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_BODY_BYTES:
        raise auth.too_large(size)
    raw = await request.body()
    return await run_in_threadpool(wire.parse_body, raw)


def _label(value: str, field: str) -> str:
    if not _LABEL_RE.match(value):
        raise errors.validation(f"{field} {value!r} must be 1-64 letters, digits and hyphens")
    return value


class Routes:
    """The route handlers, bound to one :class:`Service` and its long-poll settings."""

    def __init__(self, service: Service, long_poll: float) -> None:
        self.service = service
        self.long_poll = long_poll

    async def control_plane(self, request: Request) -> Response:
        target = request.headers.get("x-amz-target", "")
        operation = target.rpartition(".")[2]
        try:
            if operation not in CONTROL_PLANE:
                raise ServiceError(
                    "UnknownOperationException",
                    f"X-Amz-Target {target!r} is not an operation this server implements; "
                    f"it serves SageMaker.{{{', '.join(CONTROL_PLANE)}}}",
                )
            body = await _read_json(request)
            if operation == "DescribeTrainingSession":
                await self._wait_started(body.get("TrainingSessionName"))
            method: Callable[..., dict[str, Any]] = getattr(self.service, _snake(operation))
            region = auth.scope_region(request.headers.get("authorization"))
            if operation in REGIONAL and region:
                result = await run_in_threadpool(method, body, region=region)
            else:
                result = await run_in_threadpool(method, body)
            if operation == "DeleteModelPackage":
                result = {}  # the in-process extras (where files went) are not on the wire
            return wire.ok(result, "json")
        except ServiceError as exc:
            return wire.error(exc, "json")

    async def _wait_started(self, name: Any) -> None:
        """Hold a Describe of a session still loading its model, so the SDK's first status
        check already sees Running (each miss costs it a 10 s sleep)."""
        if isinstance(name, str):
            try:
                await run_in_threadpool(self.service.wait_for_session, name, START_WAIT_SECONDS)
            except ServiceError:
                pass  # unknown names are answered by the Describe itself

    async def execute(self, request: Request) -> Response:
        sampling = request.url.path.endswith("/sampling-operations")
        try:
            name = _label(request.path_params["name"], "trainingSessionName")
            body = await _read_json(request)
            run = (
                self.service.execute_sampling_operation
                if sampling
                else self.service.execute_training_operation
            )
            return wire.ok(await run_in_threadpool(run, name, body), "rest-json")
        except ServiceError as exc:
            return wire.error(exc, "rest-json")

    async def result(self, request: Request) -> Response:
        sampling = "/sampling-operations/" in request.url.path
        try:
            name = _label(request.path_params["name"], "trainingSessionName")
            op_id = _label(request.path_params["op"], "operationId")
            await self._long_poll(name, op_id)
            get = (
                self.service.get_sampling_operation_result
                if sampling
                else self.service.get_training_operation_result
            )
            return wire.ok(await run_in_threadpool(get, name, op_id), "rest-json")
        except ServiceError as exc:
            return wire.error(exc, "rest-json")

    async def _long_poll(self, name: str, op_id: str) -> None:
        """Wait, without holding a thread, until the op is terminal or ``long_poll`` passes."""
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def wake() -> None:
            def settle() -> None:
                if not finished.done():
                    finished.set_result(None)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:
                pass  # the loop closed (server shutting down)

        await run_in_threadpool(self.service.on_operation_done, name, op_id, wake)
        try:
            await asyncio.wait_for(finished, self.long_poll)
        except asyncio.TimeoutError:
            pass


def create_app(
    service: Service, *, long_poll: float = 0.5, credential: auth.Credential | None = None
) -> Starlette:
    """The ASGI app serving ``service``: both SageMaker services and ``/_localsession/``,
    behind the body limit and, with ``credential``, SigV4 checks (server/auth.py)."""
    routes = Routes(service, long_poll)
    session = "/v1/training-sessions/{name}"
    return Starlette(
        middleware=[Middleware(auth.RequestGuard, credential=credential)],
        routes=[
            Route("/", routes.control_plane, methods=["POST"]),
            Route(f"{session}/operations", routes.execute, methods=["POST"]),
            Route(f"{session}/operations/{{op}}", routes.result, methods=["GET"]),
            Route(f"{session}/sampling-operations", routes.execute, methods=["POST"]),
            Route(f"{session}/sampling-operations/{{op}}", routes.result, methods=["GET"]),
            *chat_routes.routes(service),
            *admin.routes(service),
            *s3.routes(lambda: service.registry),
            *tinker.mount(service),
        ],
    )
