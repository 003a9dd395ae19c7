"""The HTTP routes: the control plane, the runtime and the admin namespace over one Service.

A thin layer: each route parses the request, calls the runtime's operation of the same name
and serialises what comes back. Every behaviour (validation, ordering, limits, errors) is the
runtime's, shared with the in-process clients. The only things done here are the holds that
turn the SDK's fixed 2 s poll and 10 s status wait into near-zero latency (docs/wire.md#6):

- an ``Execute*Operation`` answer is held until its op is terminal (at most ``submit_hold``
  seconds, never more than ``MAX_SUBMIT_HOLD_SECONDS``; not at all for a training op queued
  behind another). The SDK waits for that answer on a future that honours
  ``result(timeout=t)`` to the millisecond, and its first poll then finds the op complete;
- a ``Get*OperationResult`` poll of a running op is held until the op is terminal (at most
  ``long_poll`` seconds), so a poll never answers "in progress" for an op that completes
  while the poll is open;
- a starting session's ``DescribeTrainingSession`` is held until its model is loaded.

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
from localsession.server.console.console_routes import off_routes
from localsession.server.console.console_routes import routes as console_routes

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
#: Default seconds a result poll of a running op is held. The SDK checks a
#: ``result(timeout=t)`` deadline only between polls and sleeps 2 s after each incomplete one,
#: so a wait on the poll path ends within t + LONG_POLL_SECONDS + 2 s.
LONG_POLL_SECONDS = 1.0
#: Seconds the SDK's ``stop()`` and ``delete()`` wait for submits still in flight (its
#: ``BackgroundSubmitter.close`` timeout, sagemaker-train 1.27.0) before failing them with
#: "still in flight when its client closed". The SDK sends one training submit at a time, so
#: while one is held the ops queued after it are still in the client.
SDK_CLOSE_WAIT_SECONDS = 5.0
#: The longest a submit may be held: the held submit plus the client's queued ones (each
#: answered at once, as they queue behind a running op) must reach the server inside
#: ``SDK_CLOSE_WAIT_SECONDS``, so that a stop skips them as in-process (docs/wire.md#6).
MAX_SUBMIT_HOLD_SECONDS = 3.0
#: Default seconds an ``Execute*Operation`` answer is held for its op to finish. Past it the
#: op's id is answered and the held poll takes over.
SUBMIT_HOLD_SECONDS = MAX_SUBMIT_HOLD_SECONDS
#: Sampling submits of one session held at once. The SDK sends submits from a thread pool
#: of (CPUs + 4) workers shared by a training client and its samplers; a held submit keeps
#: a worker, so at most this many are held and the rest of a wide fan-out is answered at once.
MAX_HELD_SAMPLING = 3


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

    def __init__(self, service: Service, long_poll: float, submit_hold: float) -> None:
        check_submit_hold(submit_hold)
        self.service = service
        self.long_poll = long_poll
        self.submit_hold = submit_hold
        #: Sampling submits held per session (touched only on the event loop).
        self._held_sampling: dict[str, int] = {}

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
            answer = await run_in_threadpool(run, name, body)
            await self._hold_submit(name, answer["operationId"], sampling)
            return wire.ok(answer, "rest-json")
        except ServiceError as exc:
            return wire.error(exc, "rest-json")

    async def _hold_submit(self, name: str, op_id: str, sampling: bool) -> None:
        """Hold an accepted submit's answer until its op is terminal or ``submit_hold``
        passes; not for a training op queued behind another (one running, queued, or a
        missing sequence number it would wait on), nor past :data:`MAX_HELD_SAMPLING`.

        A queued op answered at once frees the client's turn for its next submit, so every op
        a client has sent reaches the queue while the head op runs: a ``stop()`` then skips
        them here instead of the SDK abandoning them after its close wait."""
        if self.submit_hold <= 0:
            return
        if not sampling:
            await self._wait_done(name, op_id, self.submit_hold, unless_behind=True)
            return
        held = self._held_sampling.get(name, 0)
        if held >= MAX_HELD_SAMPLING:
            return
        self._held_sampling[name] = held + 1
        try:
            await self._wait_done(name, op_id, self.submit_hold, unless_behind=False)
        finally:
            left = self._held_sampling[name] - 1
            if left:
                self._held_sampling[name] = left
            else:
                del self._held_sampling[name]

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
        await self._wait_done(name, op_id, self.long_poll, unless_behind=False)

    async def _wait_done(
        self, name: str, op_id: str, seconds: float, *, unless_behind: bool
    ) -> None:
        """Wait, without holding a thread, until the op is terminal or ``seconds`` pass
        (``unless_behind``: not at all for a training op behind another unfinished one). An
        unknown session or op ends the wait; the request's own answer reports it."""
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

        def watch() -> bool:
            if unless_behind and self.service.session(name).runs_behind_another(op_id):
                return False
            self.service.on_operation_done(name, op_id, wake)
            return True

        try:
            if not await run_in_threadpool(watch):
                return
        except ServiceError:
            return
        try:
            await asyncio.wait_for(finished, seconds)
        except asyncio.TimeoutError:
            pass


def check_submit_hold(seconds: float) -> None:
    """Refuse a submit hold the SDK's ``stop()`` cannot wait out (ValueError, with the fix)."""
    if not 0 <= seconds <= MAX_SUBMIT_HOLD_SECONDS:
        raise ValueError(
            f"submit hold {seconds:g} s is outside 0-{MAX_SUBMIT_HOLD_SECONDS:g} s: the SDK's "
            f"stop() and delete() wait {SDK_CLOSE_WAIT_SECONDS:g} s for submits in flight and "
            "then drop their results; use --submit-hold between 0 and "
            f"{MAX_SUBMIT_HOLD_SECONDS:g}"
        )


def create_app(
    service: Service,
    *,
    long_poll: float = LONG_POLL_SECONDS,
    submit_hold: float = SUBMIT_HOLD_SECONDS,
    credential: auth.Credential | None = None,
    console: str | None = None,
) -> Starlette:
    """The ASGI app serving ``service``: both SageMaker services and ``/_localsession/``,
    behind the body limit and, with ``credential``, SigV4 checks (server/auth.py). The
    console (server/console/) is on, unless ``console`` says why it is off."""
    routes = Routes(service, long_poll, submit_hold)
    dialect = tinker.new_dialect(service)
    secret = credential.secret_key if credential is not None else None
    shown = console_routes(service, dialect, secret) if console is None else off_routes(console)
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
            *shown,
            *tinker.mount(service, dialect),
        ],
    )
