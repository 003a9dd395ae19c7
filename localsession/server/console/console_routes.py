"""The console's HTTP routes: the page, its vendored assets, its JSON API, trace downloads,
and Tinker's ``GET /api/v1/sessions/{id}/trace_export`` (what ``tinker session
export-trace`` calls).

Read-only: every route is a GET over :class:`~localsession.server.console.view.Console`.
Each response carries a Content-Security-Policy that lets the page load nothing from
anywhere but this server. Under ``--auth`` the middleware (server/auth.py, with
console/access.py) has already checked the key before a route runs.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from localsession.runtime.errors import ServiceError
from localsession.runtime.trace import chrome_trace
from localsession.server.console import access
from localsession.server.console.view import Console, TinkerTables

STATIC = Path(__file__).parent / "static"
#: Nothing but this server: no CDN, no font service, no beacon.
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; frame-ancestors 'none'"
)
_HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}


def _json(body: Any, status: int = 200) -> Response:
    """``body`` as JSON the page's ``JSON.parse`` reads whatever a session recorded: a
    non-finite number as null, text as ASCII escapes (a lone surrogate a relaxed client sent
    in a description is no UTF-8, and made the session's detail a 500 for good)."""
    text = json.dumps(_finite(body), ensure_ascii=True, separators=(",", ":"))
    return Response(text, status_code=status, media_type="application/json", headers=_HEADERS)


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinity (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _missing(message: str) -> Response:
    return _json({"error": message}, 404)


def _trace_file(trace: dict[str, Any], name: str) -> Response:
    headers = dict(_HEADERS)
    headers["Content-Disposition"] = f'attachment; filename="{name}.trace.json"'
    return Response(json.dumps(trace), media_type="application/json", headers=headers)


def routes(service: Any, tinker: TinkerTables | None, secret: str | None) -> list[BaseRoute]:
    """The console's routes over ``service`` (``secret``: the ``--auth`` secret, which signs
    the links ``trace_export`` hands out)."""
    console = Console(service, tinker)

    async def page(request: Request) -> Response:
        html = (STATIC / "index.html").read_bytes()
        return Response(html, media_type="text/html; charset=utf-8", headers=_HEADERS)

    async def sessions(request: Request) -> Response:
        def read() -> dict[str, Any]:
            return {
                "sessions": console.sessions(),
                "tinker_sessions": console.tinker_sessions(),
                "auth": secret is not None,
            }

        return _json(await run_in_threadpool(read))

    async def detail(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            since = int(request.query_params.get("since", "0"))
        except ValueError:
            return _json({"error": "since must be an event number (an integer)"}, 400)
        try:
            return _json(await run_in_threadpool(console.detail, name, since))
        except ServiceError:
            return _missing(f"no session named {name!r} on this server")

    async def session_trace(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in {s.name for s in service.sessions()}:
            return _missing(f"no session named {name!r} on this server")
        trace = chrome_trace(service.events.events(name), console.trace_labels([name]))
        return _trace_file(trace, name)

    async def all_trace(request: Request) -> Response:
        return _trace_file(chrome_trace(service.events.events(), console.trace_labels()), "all")

    async def tinker_trace(request: Request) -> Response:
        sid = request.path_params["sid"]
        if not console.known_tinker_session(sid):
            return _missing(f"no Tinker session {sid!r} on this server")
        names = console.runtime_sessions_of(sid)
        events = [e for name in names for e in service.events.events(name)]
        return _trace_file(chrome_trace(events, console.trace_labels(names)), sid)

    async def trace_export(request: Request) -> Response:
        """Tinker's export poll: the trace is built on request, so it is ready at once."""
        sid = request.path_params["sid"]
        if not console.known_tinker_session(sid):
            return _json({"status": "failed", "error": f"no Tinker session {sid!r} here"})
        path = f"{access.API_PATH}tinker/{sid}/trace.json"
        url = str(request.base_url).rstrip("/") + path
        if secret is not None:
            url += "?" + access.signed_query(secret, path)
        return _json({"status": "ready", "url": url})

    async def archive(request: Request) -> Response:
        group, version = request.path_params["group"], request.path_params["version"]

        def build() -> bytes | None:
            if not (version.isascii() and version.isdigit()):  # int() reads "٣" as 3 too
                return None
            directory = service.control.package_dir_at(group, int(version))
            if directory is None:
                return None
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(directory, arcname=f"{group}-{version}")
            return buffer.getvalue()

        data = await run_in_threadpool(build)
        if data is None:
            return _missing(f"no model package {group}/{version} on this server")
        headers = dict(_HEADERS)
        headers["Content-Disposition"] = f'attachment; filename="{group}-{version}.tar"'
        return Response(data, media_type="application/x-tar", headers=headers)

    async def to_page(request: Request) -> Response:
        return RedirectResponse(access.CONSOLE_PATH + "/")

    api = access.API_PATH.rstrip("/")
    return [
        Route(access.CONSOLE_PATH, to_page, methods=["GET"]),
        Route(access.CONSOLE_PATH + "/", page, methods=["GET"]),
        Mount(access.CONSOLE_PATH + "/static", app=StaticFiles(directory=STATIC)),
        Route(api + "/sessions", sessions, methods=["GET"]),
        Route(api + "/sessions/{name}", detail, methods=["GET"]),
        Route(api + "/sessions/{name}/trace.json", session_trace, methods=["GET"]),
        Route(api + "/trace.json", all_trace, methods=["GET"]),
        Route(api + "/tinker/{sid}/trace.json", tinker_trace, methods=["GET"]),
        Route(api + "/packages/{group}/{version}/archive.tar", archive, methods=["GET"]),
        Route("/api/v1/sessions/{sid}/trace_export", trace_export, methods=["GET"]),
    ]


def off_routes(reason: str) -> list[BaseRoute]:
    """What ``/console`` answers when the console is off (a non-loopback host)."""

    async def off(request: Request) -> Response:
        return Response(reason + "\n", status_code=404, media_type="text/plain")

    return [
        Route(access.CONSOLE_PATH, off, methods=["GET"]),
        Route(access.CONSOLE_PATH + "/{rest:path}", off, methods=["GET"]),
    ]
