"""The RestClient's routes: training runs, checkpoints, delete and TTL, over the registry.

A checkpoint is a model package keyed by its ``tinker://`` path (checkpoints.py); a
training run is every model this server created plus every run id a checkpoint names (so a
restarted server still lists them). A TTL is kept in memory; an expired checkpoint is
deleted (its files moved to the registry's ``retained/``) the next time checkpoints are
listed or resolved.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localsession import vocab
from localsession.runtime import errors
from localsession.server import wire
from localsession.server.tinker import external
from localsession.server.tinker.dialect import Dialect

Handler = Callable[[Request], Awaitable[Response]]
#: The owner of every training run here: one local user, in the hosted API's owner form
#: (``tml:organization_user:<uuid>``); the uuid is ``uuid5(NAMESPACE_URL, "localsession")``,
#: the same on every machine and across restarts.
LOCAL_OWNER = f"tml:organization_user:{uuid.uuid5(uuid.NAMESPACE_URL, 'localsession')}"


def expire(dialect: Dialect) -> None:
    """Delete the checkpoints whose TTL has passed."""
    for path in dialect.checkpoints.due():
        arn = dialect.checkpoints.package_of(path, required=False)
        if arn:
            dialect.service.control.delete_package(arn)
        dialect.checkpoints.forget(path)


def checkpoints(dialect: Dialect, run: str | None = None) -> list[dict[str, Any]]:
    expire(dialect)
    out = []
    for package in dialect.checkpoints.packages():
        path = package.key
        run_id, _, checkpoint_id = path[len("tinker://") :].partition("/")
        if run is not None and run_id != run:
            continue
        expires, metadata = dialect.checkpoints.listed(path, package.arn)
        out.append(
            {
                "checkpoint_id": checkpoint_id,
                "checkpoint_type": _kind(checkpoint_id),
                "time": package.created.isoformat(),
                "tinker_path": path,
                "public": False,
                "expires_at": expires.isoformat() if expires else None,
                "user_metadata": metadata,
            }
        )
    return out


def _kind(checkpoint_id: str) -> str:
    if checkpoint_id.startswith("sampler"):
        return "sampler"
    return "external" if checkpoint_id.startswith(external.SEGMENT) else "training"


def training_run(dialect: Dialect, run: str, ckpts: list[dict[str, Any]]) -> dict[str, Any]:
    model = dialect.models.get(run)
    mine = [c for c in ckpts if c["tinker_path"].startswith(f"tinker://{run}/")]
    if model is None and not mine:
        raise errors.not_found(f"training run {run!r} does not exist on this server", runtime=True)
    if model is not None:
        base, rank = dialect.canonical(model.base_model), model.rank
        last = model.last_request.isoformat()
    else:
        info = dialect.checkpoints.info(mine[0]["tinker_path"])
        base, rank, last = info.base_model, info.rank, mine[0]["time"]
    train = [c for c in mine if c["checkpoint_type"] == "training"]
    sampler = [c for c in mine if c["checkpoint_type"] == "sampler"]
    return {
        "training_run_id": run,
        "base_model": base,
        "model_owner": LOCAL_OWNER,
        "is_lora": True,
        "lora_rank": rank,
        "last_request_time": last,
        "last_checkpoint": train[0] if train else None,
        "last_sampler_checkpoint": sampler[0] if sampler else None,
        "user_metadata": (model.user_metadata if model else None),
    }


def _page(request: Request, items: list[Any]) -> tuple[list[Any], dict[str, int]]:
    limit = int(request.query_params.get("limit") or vocab.TINKER_PAGE_LIMIT)
    offset = int(request.query_params.get("offset") or 0)
    cursor = {"offset": offset, "limit": limit, "total_count": len(items)}
    return items[offset : offset + limit], cursor


def table(dialect: Dialect) -> list[tuple[str, Handler, str]]:
    async def list_runs(request: Request) -> Response:
        def build() -> list[dict[str, Any]]:
            ckpts = checkpoints(dialect)
            runs = dialect.models.ids()
            for c in ckpts:
                run = c["tinker_path"][len("tinker://") :].split("/")[0]
                if run not in runs:
                    runs.append(run)
            return [training_run(dialect, run, ckpts) for run in runs]

        items, cursor = _page(request, await run_in_threadpool(build))
        return JSONResponse({"training_runs": items, "cursor": cursor})

    async def get_run(request: Request) -> Response:
        run = request.path_params["run"]
        ckpts = await run_in_threadpool(checkpoints, dialect, run)
        return JSONResponse(await run_in_threadpool(training_run, dialect, run, ckpts))

    async def list_run_checkpoints(request: Request) -> Response:
        items = await run_in_threadpool(checkpoints, dialect, request.path_params["run"])
        return JSONResponse({"checkpoints": items})

    async def list_all_checkpoints(request: Request) -> Response:
        items, cursor = _page(request, await run_in_threadpool(checkpoints, dialect))
        return JSONResponse({"checkpoints": items, "cursor": cursor})

    def _path(request: Request) -> str:
        return f"tinker://{request.path_params['run']}/{request.path_params['checkpoint']}"

    async def delete_checkpoint(request: Request) -> Response:
        path = _path(request)

        def run() -> None:
            dialect.service.control.delete_package(dialect.checkpoints.package_of(path))
            dialect.checkpoints.forget(path)

        await run_in_threadpool(run)
        return JSONResponse({})

    async def ttl(request: Request) -> Response:
        path = _path(request)
        body = wire.parse_body(await request.body() or b"{}")
        await run_in_threadpool(dialect.checkpoints.package_of, path)
        seconds = body.get("ttl_seconds")
        dialect.checkpoints.set_ttl(path, None if seconds is None else int(seconds))
        return JSONResponse({})

    async def weights_info(request: Request) -> Response:
        body = wire.parse_body(await request.body() or b"{}")
        info = await run_in_threadpool(dialect.checkpoints.info, str(body.get("tinker_path") or ""))
        return JSONResponse(
            {
                "base_model": info.base_model,
                "is_lora": True,
                "lora_rank": info.rank,
                "train_unembed": info.adapts_head,
                "train_mlp": True,
                "train_attn": True,
            }
        )

    async def external_urls(request: Request) -> Response:
        path = _path(request).removesuffix("/external_weights_urls")
        base = str(request.base_url)
        return JSONResponse(await run_in_threadpool(external.urls, dialect, path, base))

    async def external_file(request: Request) -> Response:
        p = request.path_params
        data = await run_in_threadpool(external.content, dialect, p["run"], p["name"], p["file"])
        return Response(data, media_type="application/octet-stream")

    async def save_external(request: Request) -> Response:
        body = wire.parse_body(await request.body() or b"{}")
        request_id = await run_in_threadpool(external.save, dialect, body)
        return JSONResponse({"request_id": request_id})

    ckpt = "/training_runs/{run}/checkpoints/{checkpoint:path}"
    return [
        ("/save_weights_external", save_external, "POST"),
        (ckpt + "/external_weights_urls", external_urls, "GET"),
        ("/external_weights_files/{run}/{name}/{file:path}", external_file, "GET"),
        ("/training_runs", list_runs, "GET"),
        ("/training_runs/{run}", get_run, "GET"),
        ("/training_runs/{run}/checkpoints", list_run_checkpoints, "GET"),
        (ckpt + "/ttl", ttl, "PUT"),
        (ckpt, delete_checkpoint, "DELETE"),
        ("/checkpoints", list_all_checkpoints, "GET"),
        ("/weights_info", weights_info, "POST"),
    ]
