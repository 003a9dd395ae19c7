"""``localsession serve`` with a hook that stalls one engine call, so a test can SIGKILL the
server at a chosen point.

Run as ``python crash_harness.py serve ...`` (the normal ``serve`` arguments). With
``LOCALSESSION_STALL=<kind>:<n>`` the n-th ``saveState`` / ``saveWeights`` /
``forwardBackward`` of the process stalls forever once it is under way, after touching the file
``LOCALSESSION_STALL_MARK``:

- a save stalls after the engine has written its files into the registry's staging directory,
  before ``package.json`` and the rename (a half-written package on disk);
- a forward_backward stalls before it returns (mid-op; later ops queue behind it).

Nothing else changes: it is the real CLI, service, engine and registry.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import localsession.engine as engine_module
from localsession.cli import main
from localsession.port import EngineSpec

_calls: dict[str, int] = {}
_lock = threading.Lock()


def _maybe_stall(kind: str) -> None:
    wanted, _, count = os.environ.get("LOCALSESSION_STALL", "").partition(":")
    if wanted != kind:
        return
    with _lock:
        _calls[kind] = _calls.get(kind, 0) + 1
        hit = _calls[kind] == int(count or 1)
    if hit:
        Path(os.environ["LOCALSESSION_STALL_MARK"]).write_text(kind)
        threading.Event().wait()  # until SIGKILL


class StallingEngine:
    """The real engine, with a stall point in the calls a crash test aims at."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.forward_backward(*args, **kwargs)
        if kwargs.get("backward"):
            _maybe_stall("forwardBackward")
        return result

    def save_package(self, directory: str, *, include_optimizer: bool, **kwargs: Any) -> Any:
        result = self._inner.save_package(directory, include_optimizer=include_optimizer, **kwargs)
        _maybe_stall("saveState" if include_optimizer else "saveWeights")
        return result


_real_create = engine_module.create_engine


def _create(spec: EngineSpec) -> Any:
    return StallingEngine(_real_create(spec))


engine_module.create_engine = _create  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
