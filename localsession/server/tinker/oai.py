"""Tinker's OpenAI-compatible routes: ``{base}/oai/api/v1/chat/completions`` (streamed or
not), ``/completions`` (streamed or not) and ``/models``, for ``openai.OpenAI(base_url=
f"{base}/oai/api/v1", api_key=<the Tinker API key>)``.

``model`` is named as Tinker names it:

- a base model id (``localsession/tiny``, a ``--model-map`` name): sampled by the dialect's
  hidden sampler session for that model (samplers.py), on the base weights;
- the ``tinker://<run>/sampler_weights/<name>`` path of a checkpoint saved for sampling: its
  package, on the run's own session while that model is alive, else on the hidden session;
- ``<base model id>;<checkpoint path>``: the same checkpoint, where the base must be the one
  it was trained on.

The requests are the runtime's chat and text-completion requests (runtime/chat/), so
fields, refusals, stops, seeds and logprobs are exactly those of ``/v1/chat/completions``;
answers echo ``model`` as sent. Streams are Server-Sent Events ending ``data: [DONE]``.
Refusals use OpenAI's error shape. Under ``--auth`` the bearer is the Tinker API key
``tml-<SECRET>`` (server/auth.py; a wrong one is a 401).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import PreparedChat
from localsession.server import wire
from localsession.server.chat_routes import openai_refusal, sse_events
from localsession.server.tinker import rest
from localsession.server.tinker.dialect import Dialect
from localsession.server.tinker.samplers import Sampler

PREFIX = "/oai/api/v1"
SAMPLER_SEGMENT = "/sampler_weights/"


def _json(body: Any) -> Response:
    return Response(wire.dumps(body), media_type="application/json")


class OpenAIRoutes:
    """The three routes over one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.service = dialect.service

    # -- the model a request names -------------------------------------------------------

    def resolve(self, model: Any) -> tuple[str, str | None]:
        """(the runtime session that samples ``model``, the package it reads or None)."""
        if not isinstance(model, str) or not model.strip():
            raise errors.validation(
                "'model' is required: a base model id or a tinker://.../sampler_weights/... "
                f"path (GET {PREFIX}/models lists them)"
            )
        base, _, path = model.rpartition(";") if ";" in model else ("", "", model)
        if not path.startswith("tinker://"):
            base, path = model, ""
        if not path:
            return self._on_base(base), None
        if SAMPLER_SEGMENT not in path:
            raise errors.validation(
                f"model {path!r} is not a sampler checkpoint: name the tinker:// path of one "
                "saved for sampling (save_weights_for_sampler), .../sampler_weights/<name>"
            )
        info = self.dialect.checkpoints.info(path)  # 404 naming the path if unknown
        arn, trained_on = info.arn, info.base_model
        if base and self.dialect.canonical(base) != self.dialect.canonical(trained_on):
            raise errors.validation(
                f"model {model!r}: {path} was trained on {trained_on}, not {base}; name its "
                "own base model, or the path alone"
            )
        sampler = Sampler(
            sampler_id=f"oai-{uuid.uuid4().hex}",
            base_model=self.dialect.tokenizer_id(trained_on),
            model_path=path,
            package=arn,
            model_id=path[len("tinker://") :].split("/")[0],
            unembed=info.adapts_head,
        )
        return self.dialect.sampling.session_for(sampler), arn

    def _on_base(self, base: str) -> str:
        try:
            self.service.resolve_base_model(base)
        except ValueError as exc:
            raise errors.not_found(str(exc), runtime=True) from None
        sampler = Sampler(
            sampler_id=f"oai-{uuid.uuid4().hex}",
            base_model=self.dialect.tokenizer_id(base),
            model_path=None,
            package=None,
            model_id=None,
        )
        return self.dialect.sampling.session_for(sampler)

    # -- the routes ----------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        return await self._answer(request, text=False)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, text=True)

    async def _answer(self, request: Request, *, text: bool) -> Response:
        try:
            body = wire.parse_body(await request.body())

            def prepare() -> PreparedChat:
                session, package = self.resolve(body.get("model"))
                prepared = self.service.chat_prepare(
                    session, body, model_package=package, text=text
                )
                return dataclasses.replace(prepared, target=str(body["model"]))  # echoed

            prepared = await run_in_threadpool(prepare)
            if not prepared.request.stream:
                return _json(await run_in_threadpool(self.service.chat_run, prepared))
        except ServiceError as exc:
            return openai_refusal(exc)
        events = sse_events(self.service, prepared)
        return StreamingResponse(events, media_type="text/event-stream")

    async def models(self, request: Request) -> Response:
        def rows() -> list[dict[str, Any]]:
            out = [
                {"id": name, "object": "model", "created": 0, "owned_by": rest.LOCAL_OWNER}
                for name in self.dialect.models_list()
            ]
            for ckpt in rest.checkpoints(self.dialect):
                if ckpt["checkpoint_type"] == "sampler":
                    created = ckpt["time"]
                    out.append(
                        {
                            "id": ckpt["tinker_path"],
                            "object": "model",
                            "created": _epoch(created),
                            "owned_by": rest.LOCAL_OWNER,
                        }
                    )
            return out

        try:
            return _json({"object": "list", "data": await run_in_threadpool(rows)})
        except ServiceError as exc:
            return openai_refusal(exc)


def _epoch(iso: str) -> int:
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return 0


def routes(dialect: Dialect) -> list[Route]:
    handlers = OpenAIRoutes(dialect)
    return [
        Route(f"{PREFIX}/chat/completions", handlers.chat, methods=["POST"]),
        Route(f"{PREFIX}/completions", handlers.completions, methods=["POST"]),
        Route(f"{PREFIX}/models", handlers.models, methods=["GET"]),
    ]
