"""Chat-completion routes: the runtime's pass-through sample operations and OpenAI's API.

- ``POST /training-sessions/{name}/sample`` and ``.../sample-with-response-stream``
  (SampleTrainingSession[WithResponseStream], docs/wire.md#7): the session is in the
  path, the ``X-Amzn-SageMaker-Model-Package`` header may pick a checkpoint, and refusals use
  the runtime's AWS error shape.
- ``POST /v1/chat/completions`` and ``GET /v1/models``, for ``openai.OpenAI(base_url=...)``:
  ``model`` names a session or a model-package ARN, and refusals use OpenAI's error shape.

Streams are Server-Sent Events of ``chat.completion.chunk`` objects ending in
``data: [DONE]``. A request is checked before its stream starts (a refusal is a normal error
response); an error while sampling is sent as ``data: {"error": ...}`` with no ``[DONE]``.
The behaviour (parsing, prompts, sampling) is the runtime's (``runtime/chat/protocol.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from localsession.runtime import errors
from localsession.runtime.chat import protocol
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import PreparedChat, Service
from localsession.server import wire

Shape = Literal["aws", "openai"]
PACKAGE_HEADER = "x-amzn-sagemaker-model-package"


def _error(exc: ServiceError, shape: Shape) -> Response:
    if shape == "aws":
        return wire.error(exc, "rest-json")
    return Response(
        wire.dumps(protocol.openai_error(exc)),
        status_code=exc.http_status,
        media_type="application/json",
    )


def openai_refusal(exc: ServiceError) -> Response:
    """A refusal in OpenAI's error shape (also Tinker's ``/oai/api/v1`` routes')."""
    return _error(exc, "openai")


async def sse_events(service: Service, prepared: PreparedChat) -> AsyncIterator[bytes]:
    """A prepared request's stream as Server-Sent Events, ending ``data: [DONE]``; an error
    while sampling is sent as an ``error`` event with no ``[DONE]``."""
    # each chunk is sent as the decoder produces it (runtime/chat/streaming.py)
    try:
        async for event in iterate_in_threadpool(service.chat_stream(prepared)):
            yield _sse(event)
    except ServiceError as exc:
        yield _sse(protocol.openai_error(exc))  # mid-stream: an error event, no [DONE]
        return
    yield b"data: [DONE]\n\n"


def _sse(body: Any) -> bytes:
    return b"data: " + wire.dumps(body) + b"\n\n"


class ChatRoutes:
    def __init__(self, service: Service) -> None:
        self.service = service

    async def _prepare(self, request: Request, target: str | None) -> tuple[PreparedChat, bool]:
        body = wire.parse_body(await request.body())
        if target is None:  # OpenAI: the model field names the session or package
            target = body.get("model")
            if not isinstance(target, str) or not target:
                raise errors.validation(
                    "'model' is required: a session name or a model-package ARN "
                    "(GET /v1/models lists them)"
                )
        package = request.headers.get(PACKAGE_HEADER) or None
        prepared = await run_in_threadpool(
            self.service.chat_prepare, target, body, model_package=package
        )
        return prepared, prepared.request.stream

    async def _answer(
        self, request: Request, target: str | None, shape: Shape, stream: bool | None
    ) -> Response:
        try:
            prepared, asked_stream = await self._prepare(request, target)
            if not (asked_stream if stream is None else stream):
                body = await run_in_threadpool(self.service.chat_run, prepared)
                return Response(wire.dumps(body), media_type="application/json")
        except ServiceError as exc:
            return _error(exc, shape)
        events = sse_events(self.service, prepared)
        return StreamingResponse(events, media_type="text/event-stream")

    async def sample(self, request: Request) -> Response:
        return await self._answer(request, request.path_params["name"], "aws", stream=False)

    async def sample_stream(self, request: Request) -> Response:
        return await self._answer(request, request.path_params["name"], "aws", stream=True)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, None, "openai", stream=None)

    async def models(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.service.chat_models)
        return Response(wire.dumps({"object": "list", "data": rows}), media_type="application/json")


def routes(service: Service) -> list[Route]:
    handlers = ChatRoutes(service)
    return [
        Route("/training-sessions/{name}/sample", handlers.sample, methods=["POST"]),
        Route(
            "/training-sessions/{name}/sample-with-response-stream",
            handlers.sample_stream,
            methods=["POST"],
        ),
        Route("/v1/chat/completions", handlers.completions, methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
    ]
