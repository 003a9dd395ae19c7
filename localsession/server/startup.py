"""Start-up checks for ``localsession serve``, and its one-line-per-request log.

Every configuration mistake a server can detect before it serves is raised here as
:class:`StartupError`, whose message is one line naming the offending setting and its fix;
the CLI prints it on stderr and exits 2, with no traceback. Checked: the ``--model-map``
entries, the whole model map (``LOCALSESSION_MODEL_MAP`` and ``<home>/models.json``), the
home (writable, not held by another server: runtime/home.py) and the port.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from localsession.runtime.home import ConfigError
from localsession.runtime.models.catalog import LocalCatalog, hub_content_name
from localsession.runtime.models.sources import MODEL_MAP_ENV, parse_map_entries
from localsession.server.hosting import bind

logger = logging.getLogger("localsession.server")

_TARGETS = (
    "a built-in model (localsession/tiny, localsession/small), a directory holding a "
    "config.json, a .gguf file, or a model id in the local Hugging Face cache"
)


class StartupError(ConfigError):
    """A configuration mistake found before serving; the message is one line with the fix."""


def check_model_map_flags(entries: Sequence[str]) -> dict[str, str]:
    """Each ``--model-map`` value is ``NAME=TARGET`` with both parts present; the map."""
    for entry in entries:
        name, sep, target = entry.partition("=")
        if not sep or not name.strip() or not target.strip() or "," in entry:
            raise StartupError(
                f"--model-map {entry!r}: expected NAME=TARGET with both parts, e.g. "
                "--model-map openai/gpt-oss-20b=localsession/small"
            )
        if not hub_content_name(name.strip()):
            raise StartupError(
                f"--model-map {entry!r}: NAME must contain letters or digits (it is also "
                "the model's Hub content name)"
            )
    return parse_map_entries(list(entries), "--model-map")


def check_model_map(catalog: LocalCatalog, flags: Mapping[str, str]) -> None:
    """Every mapped name resolves; the message names where a broken entry came from."""
    try:
        mapping = catalog.model_map()
    except ValueError as exc:
        raise StartupError(str(exc).splitlines()[0]) from None
    for name, target in mapping.items():
        try:
            catalog.resolve(name)
        except ValueError:
            if name in flags:
                where = f"--model-map {name}={target}"
            elif f"{name}=" in os.environ.get(MODEL_MAP_ENV, ""):
                where = f"{MODEL_MAP_ENV} entry {name}={target}"
            else:
                where = f"{catalog.home / 'models.json'} entry {name!r}"
            raise StartupError(
                f"{where}: target {target!r} is not {_TARGETS}; fix the target or remove the entry"
            ) from None


def bind_or_explain(host: str, port: int) -> socket.socket:
    """:func:`bind`, with a bind failure turned into one line that says what to do."""
    try:
        return bind(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} on {host} is already in use (another server?); pass --port N "
                "for another port, or --port 0 to take any free one"
            ) from None
        if exc.errno == errno.EACCES:
            raise StartupError(
                f"not permitted to listen on {host}:{port}; use a port above 1023, or --port 0"
            ) from None
        raise StartupError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); check --host and --port"
        ) from None


_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def _operation(scope: _Scope) -> str:
    """``SageMaker.CreateTrainingSession`` for the control plane, else the request path."""
    for key, value in scope.get("headers", []):
        if key == b"x-amz-target":
            return str(value.decode("latin-1"))
    return str(scope.get("path", ""))


class RequestLog:
    """ASGI middleware: one INFO line per request, ``POST <operation> <status> <ms> ms``."""

    def __init__(self, app: Any) -> None:
        self.app: _App = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]
        operation = _operation(scope)
        note = [""]

        async def record(message: _Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            elif message["type"] == "http.response.body" and status[0] == 400:
                note[0] = note[0] or _expected_refusal(operation, message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            logger.info(
                "%s %s %d%s %.1f ms",
                scope.get("method", "?"),
                operation,
                status[0],
                note[0],
                (time.perf_counter() - start) * 1e3,
            )


def _expected_refusal(operation: str, body: bytes) -> str:
    """A note for a refusal the SDK asks for on purpose, so its 400 does not alarm: every
    session creation without a group tries ``CreateModelPackageGroup`` on the default group
    and, told it exists, describes it instead."""
    if operation.endswith("CreateModelPackageGroup") and b"ResourceInUse" in body:
        return " (the group exists, as expected: the SDK then describes it)"
    return ""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str, authenticated: bool) -> None:
    """Say loudly, on stderr, that a non-loopback bind lets other machines in."""
    if is_loopback(host):
        return
    bar = "!" * 78
    print(
        f"{bar}\nWARNING: localsession is binding {host}, which is NOT a loopback address.\n"
        "Anyone who can reach this machine on that port can create sessions, run code paths\n"
        "that read and write under its home directory, and read or delete its model packages.\n"
        + (
            "SigV4 authentication (--auth) is on; requests are still sent unencrypted (HTTP).\n"
            if authenticated
            else "No authentication is on: add --auth ACCESS_KEY:SECRET, or bind 127.0.0.1.\n"
        )
        + bar,
        file=sys.stderr,
        flush=True,
    )
