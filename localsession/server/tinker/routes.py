"""The ``/api/v1/...`` routes the ``tinker`` SDK calls, over one :class:`Dialect`.

A thin layer, as server/app.py is for the SageMaker dialect: each handler parses the
request, calls the dialect (which calls the runtime) on the thread pool, and encodes what
comes back. ``retrieve_future`` holds a poll until its op finishes or :data:`HOLD_SECONDS`
pass, then answers ``try_again`` (the SDK re-polls at once, so the hold is what keeps a
pending future from spinning). Errors are JSON ``{"detail": ..., "code": ...}`` with the
runtime's HTTP status, the shape the SDK's ``APIStatusError`` carries.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localsession import vocab
from localsession.port import SampleRequest
from localsession.port_commands import SampleCommand
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.server import wire
from localsession.server.tinker import (
    codec,
    completions,
    dro,
    limits,
    rest,
    results,
    sample_options,
    session_index,
)
from localsession.server.tinker.dialect import Dialect
from localsession.server.tinker.future_table import Future
from localsession.server.tinker.samplers import INFLIGHT

#: How long a retrieve_future poll is held on an unfinished op before ``try_again``.
HOLD_SECONDS = 30.0
#: The feature flags /api/v1/client/config hands the SDK (ClientConfigResponse fields).
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "proto_compress_fwdbwd": True,
    "parallel_fwdbwd_chunks": False,
    "sample_use_retrieve_futures": True,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": True,
}
Handler = Callable[[Request], Awaitable[Response]]


def refusal(exc: ServiceError) -> Response:
    return JSONResponse({"detail": exc.message, "code": exc.code}, status_code=exc.http_status)


def guarded(handler: Handler) -> Handler:
    """Answer a ServiceError (or a malformed body) in the SDK's error shape."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except ServiceError as exc:
            return refusal(exc)
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as exc:
            # a body of the wrong shape (a list where an object goes: .get; 1e999: int(inf))
            return refusal(errors.validation(f"malformed request: {exc}"))

    return run


async def body_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    return await run_in_threadpool(wire.parse_body, raw)


class TinkerRoutes:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.service = dialect.service
        self.completions = completions.Completions(dialect)

    # -- plain JSON endpoints ------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def client_config(self, request: Request) -> Response:
        return JSONResponse(CLIENT_CONFIG)

    async def dynamic_config(self, request: Request) -> Response:
        return JSONResponse({})

    async def telemetry(self, request: Request) -> Response:
        await request.body()  # accepted and dropped
        return JSONResponse({"status": "accepted"})

    async def capabilities(self, request: Request) -> Response:
        names = await run_in_threadpool(self.dialect.models_list)
        rows = await run_in_threadpool(limits.supported_models, self.service.catalog, names)
        return JSONResponse({"supported_models": rows})

    async def create_session(self, request: Request) -> Response:
        session_id = self.dialect.create_session(await body_json(request))
        return JSONResponse({"type": "create_session", "session_id": session_id})

    async def heartbeat(self, request: Request) -> Response:
        body = await body_json(request)
        session_id = str(body.get("session_id") or "")
        if not self.dialect.heartbeat(session_id):  # closed, or expired (expiry.py)
            raise ServiceError("SessionFinished", f"session {session_id} has finished", 410)
        return JSONResponse({"type": "session_heartbeat"})

    async def finish(self, request: Request) -> Response:
        await request.body()
        await run_in_threadpool(self.dialect.finish, request.path_params["session"])
        return JSONResponse({})

    async def cancel(self, request: Request) -> Response:
        await request.body()  # sampling ops are short locally; they run to completion
        return JSONResponse({})

    async def custom_loss(self, request: Request) -> Response:
        raise errors.validation(
            "create_custom_loss uploads are not run server-side here "
            "(custom_loss_server_side is off): forward_backward_custom runs your loss in "
            f"your process on forward logprobs, then a {vocab.LossFunction.CROSS_ENTROPY} backward"
        )

    # -- models and training -------------------------------------------------------------

    def _future(self, request_id: str, model_id: str | None = None) -> Response:
        body: dict[str, Any] = {"request_id": request_id}
        if model_id:
            body["model_id"] = model_id
        return JSONResponse(body)

    async def create_model(self, request: Request) -> Response:
        body = await body_json(request)
        request_id = await run_in_threadpool(self.dialect.create_model, body)
        return self._future(request_id)

    async def get_info(self, request: Request) -> Response:
        body = await body_json(request)
        return JSONResponse(await run_in_threadpool(self.dialect.info, body.get("model_id")))

    async def forward_backward(self, request: Request) -> Response:
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        encoding = request.headers.get("content-encoding")
        try:
            decoded = await run_in_threadpool(
                codec.decode_forward_backward, raw, content_type, encoding
            )
        except codec.BodyRefused as exc:  # its header was read: free its sequence number
            await run_in_threadpool(self.dialect.numbering.refuse, exc.model_id, exc.seq_id)
            raise
        model_id, seq_id, loss_fn, config, forward_only, datums, shapes = decoded
        if request.url.path.endswith("/forward"):
            forward_only = True
        request_id = await run_in_threadpool(
            self.dialect.forward_backward,
            model_id,
            seq_id,
            loss_fn,
            config,
            forward_only,
            datums,
            shapes,
        )
        return self._future(request_id, model_id)

    async def optim_step(self, request: Request) -> Response:
        body = await body_json(request)
        return self._future(await run_in_threadpool(self.dialect.optim_step, body))

    async def save_weights(self, request: Request) -> Response:
        body = await body_json(request)
        sampler = request.url.path.endswith("/save_weights_for_sampler")
        if sampler and body.get("kind") == "inflight":  # one shared target (samplers.py)
            body = {**body, "path": INFLIGHT, "overwrite": True, "ttl_seconds": None}
        elif body.get("kind", "snapshot") != "snapshot":
            # its number is used
            self.dialect.numbering.refuse(body.get("model_id"), body.get("seq_id"))
            raise errors.validation(
                f"kind={body.get('kind')!r}: a sampling client is 'snapshot' or 'inflight'"
            )
        return self._future(await run_in_threadpool(self.dialect.save, body, sampler=sampler))

    async def load_weights(self, request: Request) -> Response:
        body = await body_json(request)
        return self._future(await run_in_threadpool(self.dialect.load, body))

    # -- sampling ------------------------------------------------------------------------

    async def create_sampler(self, request: Request) -> Response:
        body = await body_json(request)
        sampler_id = await run_in_threadpool(
            self.dialect.sampling.create_sampler,
            body.get("model_path"),
            body.get("base_model"),
            body.get("session_id"),
        )
        return JSONResponse({"type": "create_sampling_session", "sampling_session_id": sampler_id})

    async def get_sampler(self, request: Request) -> Response:
        sampler = self.dialect.sampling.sampler(request.path_params["sampler"])
        return JSONResponse(
            {
                "sampler_id": sampler.sampler_id,
                "base_model": sampler.base_model,
                "model_path": sampler.model_path,
            }
        )

    async def asample(self, request: Request) -> Response:
        body = await body_json(request)
        prompt_length = sum(len(c.get("tokens") or []) for c in body["prompt"]["chunks"])
        options = sample_options.options(body, prompt_length)
        if body.get("sampling_session_id"):
            sampler = self.dialect.sampling.sampler(body["sampling_session_id"])
        else:
            sampler_id = await run_in_threadpool(
                self.dialect.sampling.create_sampler, body.get("model_path"), body.get("base_model")
            )
            sampler = self.dialect.sampling.sampler(sampler_id)
        params = body.get("sampling_params") or {}
        stop = params.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        topk = int(body.get("topk_prompt_logprobs") or 0)
        prompt = [t for c in body["prompt"]["chunks"] for t in codec.chunk_tokens(c)]
        request_ = SampleRequest(
            prompt=prompt,
            num_samples=int(body.get("num_samples") or 1),
            max_tokens=params.get("max_tokens") or vocab.TINKER_MAX_TOKENS,
            temperature=params.get("temperature", vocab.TINKER_TEMPERATURE),
            top_p=params.get("top_p", vocab.TINKER_TOP_P),
            top_k=params.get("top_k", vocab.TINKER_TOP_K),
            stop=tuple(s for s in stops if isinstance(s, str)),
            stop_token_ids=tuple(s for s in stops if not isinstance(s, str)),
            include_prompt_logprobs=bool(body.get("prompt_logprobs")),
            topk_prompt_logprobs=topk or None,
            stop_at_eos=stop != [],  # SDK 0.38: stop=[] turns off EOS, None keeps it
        )
        if options:  # the Tinker-only fields (sample_options.py)
            request_ = dataclasses.replace(request_, **options)
        package = self.dialect.sampling.package_for(sampler)
        command = SampleCommand(request_, params.get("seed"), package)
        name = await run_in_threadpool(self.dialect.sampling.session_for, sampler)
        op_id = await run_in_threadpool(self.service.submit_sample, name, command)
        future = Future(
            vocab.OpKind.SAMPLE,
            session=name,
            op_id=op_id,
            sampling=True,
            extra={
                "topk": topk,
                "last_n": body.get("prompt_logprobs_last_n"),
            },
        )
        request_id = self.dialect.futures.add(future)
        if CLIENT_CONFIG["sample_use_retrieve_futures"]:  # the SDK's session poller reads it
            self.completions.watch(
                sampler.sampler_id, body.get("seq_id"), request_id, name, future.op_id or ""
            )
        ids = [f"{request_id}-{i}" for i in range(request_.num_samples)]
        if body.get("record_stability_info"):  # every sample recorded (stability.py)
            owner = sampler.session_id or (sampler.model_id or "").split(":", 1)[0] or None
            done = self.dialect.stability.record(ids, owner, prompt)
            await run_in_threadpool(self.service.control.when_done, name, future.op_id or "", done)
        return JSONResponse({"request_id": request_id, "sample_sequence_ids": ids})

    # -- futures -------------------------------------------------------------------------

    async def retrieve_future(self, request: Request) -> Response:
        body = await body_json(request)
        request_id = str(body.get("request_id") or "")
        future = self.dialect.futures.get(request_id)
        if future.error is not None:
            return JSONResponse({"error": future.error, "category": "user"})
        if future.value is not None:
            return JSONResponse(future.value)
        if future.kind == "create_model":
            return await self._created(request_id, future)
        if future.op_id is None:  # a dro backward, queued once its forward ran (dro.py)
            await run_in_threadpool(dro.wait_ready, future, HOLD_SECONDS)
            if future.error is not None:
                return JSONResponse({"error": future.error, "category": "user"})
            if future.op_id is None:
                return _try_again(request_id)
        assert future.session is not None and future.op_id is not None
        await self._hold(future.session, future.op_id)
        outcome = await run_in_threadpool(
            self.service.operation_outcome, future.session, future.op_id
        )
        if outcome.status not in vocab.OP_TERMINAL:
            return _try_again(request_id)
        if outcome.status != vocab.OpStatus.COMPLETED or outcome.result is None:
            message = outcome.error or f"operation {outcome.status}"
            return JSONResponse({"error": message, "category": "user"})
        proto = results.PROTOBUF in request.headers.get("accept", "")  # tinker 0.16: JSON
        return await run_in_threadpool(
            results.completed, self.dialect, future, outcome.result, proto
        )

    async def _created(self, request_id: str, future: Future) -> Response:
        assert future.session is not None
        status = await run_in_threadpool(
            self.service.wait_for_session, future.session, HOLD_SECONDS
        )
        if status == vocab.SessionStatus.RUNNING:
            return JSONResponse({"type": "create_model", "model_id": future.model_id})
        if status in (vocab.SessionStatus.CREATED, vocab.SessionStatus.SCHEDULED):
            return _try_again(request_id)
        detail = self.service.control.state(future.session).error
        return JSONResponse(
            {"error": f"the model failed to load: {detail or status}", "category": "server"}
        )

    async def _hold(self, name: str, op_id: str) -> None:
        running = asyncio.get_running_loop()
        finished = running.create_future()

        def wake() -> None:
            def settle() -> None:
                if not finished.done():
                    finished.set_result(None)

            try:
                running.call_soon_threadsafe(settle)
            except RuntimeError:
                pass

        await run_in_threadpool(self.service.on_operation_done, name, op_id, wake)
        try:
            await asyncio.wait_for(finished, HOLD_SECONDS)
        except asyncio.TimeoutError:
            pass


def _try_again(request_id: str) -> Response:
    return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})


def routes(dialect: Dialect) -> list[Route]:
    """Every Tinker route, each guarded to answer refusals in the SDK's error shape."""
    r = TinkerRoutes(dialect)
    api = "/api/v1"
    table: list[tuple[str, Handler, str]] = [
        ("/healthz", r.healthz, "GET"),
        ("/client/config", r.client_config, "POST"),
        ("/client/dynamic_config", r.dynamic_config, "POST"),
        ("/telemetry", r.telemetry, "POST"),
        ("/get_server_capabilities", r.capabilities, "GET"),
        ("/create_session", r.create_session, "POST"),
        ("/session_heartbeat", r.heartbeat, "POST"),
        ("/sessions/{session}/finish", r.finish, "POST"),
        ("/cancel_future", r.cancel, "POST"),
        ("/create_custom_loss", r.custom_loss, "POST"),
        ("/create_model", r.create_model, "POST"),
        ("/get_info", r.get_info, "POST"),
        ("/forward_backward", r.forward_backward, "POST"),
        ("/forward", r.forward_backward, "POST"),
        ("/optim_step", r.optim_step, "POST"),
        ("/save_weights", r.save_weights, "POST"),
        ("/save_weights_for_sampler", r.save_weights, "POST"),
        ("/load_weights", r.load_weights, "POST"),
        ("/create_sampling_session", r.create_sampler, "POST"),
        ("/samplers/{sampler}", r.get_sampler, "GET"),
        ("/asample", r.asample, "POST"),
        ("/retrieve_future", r.retrieve_future, "POST"),
        *rest.table(dialect),
        *session_index.table(dialect.index, dialect.models.ids),
        *completions.table(r.completions, body_json),
    ]
    out = [Route(api + path, guarded(handler), methods=[method]) for path, handler, method in table]
    out.append(
        Route(api + "/{rest:path}", guarded(_unknown), methods=["GET", "POST", "PUT", "DELETE"])
    )
    return out


async def _unknown(request: Request) -> Response:
    raise ServiceError(
        "UnknownOperationException",
        f"{request.method} {request.url.path} is not a Tinker endpoint this server implements "
        "(docs/tinker.md lists them)",
        404,
    )
