"""Helpers the mock's tests share (this directory is on sys.path, as pytest puts it there)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class SocketUsed(AssertionError):
    """Something tried to open a network connection inside the guard."""


@contextmanager
def no_sockets() -> Iterator[None]:
    """``socket.socket.connect`` (and ``connect_ex``) fail while this is open. An event loop's
    ``socketpair`` still works: it never connects."""

    def refuse(self: socket.socket, *args: Any) -> Any:
        raise SocketUsed(f"a socket tried to connect to {args!r} inside the mock")

    original = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect = refuse  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = original  # type: ignore[method-assign]
