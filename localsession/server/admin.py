"""The admin namespace, ``/_localsession/``: health, reset and fault injection.

The SDK never calls these. They are for tests, the fakes and the conformance suite:

- ``GET  /_localsession/health`` → ``{"status": "ok"}`` (open even under ``--auth``, so it
  says nothing else)
- ``POST /_localsession/reset`` → stop and forget every session (packages stay on disk)
- ``POST /_localsession/faults`` with one of
  ``{"fail": {"kind": "forwardBackward", "count": 1, "at": "execution"|"submit",
  "code": ..., "message": ...}}``, ``{"slow": {"kind": "forwardBackward", "seconds": 6,
  "count": 1}}``, ``{"throttle": N}``, ``{"expire": "<session name>"}`` or
  ``{"clear": true}``; the runtime's :class:`~localsession.runtime.faults.Faults` does the rest.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service
from localsession.server import wire

PREFIX = "/_localsession"


def _apply_fault(service: Service, body: dict[str, Any]) -> dict[str, Any]:
    if len(body) != 1:
        raise errors.validation(
            "a fault request has exactly one of 'fail', 'slow', 'throttle', 'expire' or 'clear'"
        )
    action, value = next(iter(body.items()))
    if action == "fail" and isinstance(value, dict):
        kind = value.get("kind")
        if not isinstance(kind, str):
            raise errors.validation("fail.kind must name an operation, e.g. 'forwardBackward'")
        service.faults.fail_next(
            kind,
            int(value.get("count", 1)),
            at=str(value.get("at", "execution")),
            code=value.get("code"),
            message=value.get("message"),
        )
    elif action == "slow" and isinstance(value, dict):
        kind = value.get("kind")
        if not isinstance(kind, str):
            raise errors.validation("slow.kind must name an operation, e.g. 'forwardBackward'")
        seconds = value.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise errors.validation("slow.seconds must be a number of seconds, e.g. 6")
        service.faults.slow_next(kind, float(seconds), int(value.get("count", 1)))
    elif action == "throttle" and type(value) is int and value >= 0:
        service.faults.throttle_next(value)
    elif action == "expire" and isinstance(value, str):
        service.expire_session(value)
    elif action == "clear":
        service.faults.clear()
    else:
        raise errors.validation(f"unknown fault {action!r}={value!r}; see {PREFIX}/ docs")
    return {"applied": action}


def routes(service: Service) -> list[Route]:
    async def health(request: Request) -> Response:
        return wire.ok({"status": "ok"}, "rest-json")

    async def reset(request: Request) -> Response:
        # joins session workers (up to seconds): never on the event loop
        return wire.ok({"sessionsRemoved": await run_in_threadpool(service.reset)}, "rest-json")

    async def faults(request: Request) -> Response:
        try:
            body = wire.parse_body(await request.body())
            return wire.ok(await run_in_threadpool(_apply_fault, service, body), "rest-json")
        except (ServiceError, ValueError) as exc:
            error = exc if isinstance(exc, ServiceError) else errors.validation(str(exc))
            return wire.error(error, "rest-json")

    return [
        Route(f"{PREFIX}/health", health, methods=["GET"]),
        Route(f"{PREFIX}/reset", reset, methods=["POST"]),
        Route(f"{PREFIX}/faults", faults, methods=["POST"]),
    ]
