"""Snapshot conformance: record what a backend answered, per test; check another against it.

``--snapshot-update DIR`` records, for every suite test that runs, the normalised values the
test received from the backend: each public client method's return value, each future's
``result()``, and each error raised (its type, error code and HTTP status; messages are
not compared). They go to ``DIR/<test file>.snapshot.json``, keyed by test id, with
``DIR/validation.json`` (backend, its version, the SDK's version, the date, the tolerances).

``--snapshot-check DIR`` records the same for the backend under test and compares, test by
test (localsession/parity/compare.py): shapes, strings, integers, error codes and statuses
exactly; floats within ``validation.json``'s tolerances. The parity report lists every
recorded test and every test run as ``agree``, ``differ`` (with the diff), ``not run``
(with the reason: a skip, a setup error, deselection, not collected) or ``not recorded``;
any ``differ`` fails the run. ``--snapshot-report OUT.json`` also writes it as JSON.

A returned model is recorded as its fields plus its public properties (an op result's
``metrics`` and ``loss_fn_outputs``). Values are captured by wrapping, for the duration of
the run, the public methods of the client classes the backend hands out (``ServiceClient``,
``TrainingClient``, ``SamplingClient`` and any class they return whose name ends in
``Client``) and ``result`` of the futures they return. Only calls made by the test's own
thread during the test function itself are recorded (not fixtures: their scope would make a
recording depend on test selection), and only the outermost call (a method calling another
records once).
Volatile values (ARNs, ids, times) are normalised as in cassettes (normalise.py).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from localsession.parity import compare
from localsession.parity.normalise import Normaliser

VALIDATION = "validation.json"
SUFFIX = ".snapshot.json"


def error_record(exc: BaseException) -> dict[str, Any]:
    """What an error is compared by: its type, error code and HTTP status."""
    code = getattr(exc, "code", None)
    status = getattr(exc, "http_status", None) or getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = (response.get("Error") or {}).get("Code", code)
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode", status)
    return {
        "type": type(exc).__name__,
        "code": code if isinstance(code, str) else None,
        "status": status if isinstance(status, int) else None,
    }


class Capture:
    """Wraps client and future classes; records the events of the active test."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] | None = None
        self.thread = 0
        self.norm = Normaliser()
        self._patched: list[tuple[type, str, Any]] = []
        self._seen: set[type] = set()
        self._local = threading.local()

    # -- activation ------------------------------------------------------------------------

    def start(self) -> None:
        self.events, self.thread, self.norm = [], threading.get_ident(), Normaliser()

    def stop(self) -> list[dict[str, Any]]:
        events, self.events = self.events or [], None
        return events

    def _recording(self) -> bool:
        return (
            self.events is not None
            and threading.get_ident() == self.thread
            and not getattr(self._local, "depth", 0)
        )

    # -- classes ---------------------------------------------------------------------------

    def watch_module(self, module: Any) -> None:
        for name in ("ServiceClient", "TrainingClient", "SamplingClient", "APIFuture"):
            cls = getattr(module, name, None)
            if isinstance(cls, type):
                self.watch_class(cls)

    def watch(self, value: Any) -> None:
        cls = type(value)
        if cls not in self._seen and (cls.__name__.endswith("Client") or self._future(value)):
            self.watch_class(cls)

    @staticmethod
    def _future(value: Any) -> bool:
        return callable(getattr(value, "result", None)) and hasattr(value, "done")

    def watch_class(self, cls: type) -> None:
        if cls in self._seen:
            return
        self._seen.add(cls)
        future = cls.__name__.endswith("Future") or (
            callable(getattr(cls, "result", None)) and hasattr(cls, "done")
        )
        names = ["result"] if future else [n for n in dir(cls) if not n.startswith("_")]
        for name in names:
            try:
                static = inspect.getattr_static(cls, name)
            except AttributeError:
                continue
            if not inspect.isfunction(static) or inspect.iscoroutinefunction(static):
                continue  # async methods are left alone (their awaitables are not captured)
            original = getattr(cls, name)
            self._patched.append((cls, name, cls.__dict__.get(name)))
            setattr(cls, name, self._wrap(original, name, future))

    def _wrap(self, original: Callable[..., Any], name: str, future: bool) -> Any:
        capture = self

        def wrapper(this: Any, *args: Any, **kwargs: Any) -> Any:
            if not capture._recording():
                return original(this, *args, **kwargs)
            label = f"result:{getattr(this, '_snapshot_origin', '?')}" if future else name
            capture._local.depth = 1
            try:
                out = original(this, *args, **kwargs)
            except Exception as exc:
                capture._add({"call": label, "error": error_record(exc)})
                raise
            finally:
                capture._local.depth = 0
            capture._add({"call": label, "value": capture._value(out, name)})
            return out

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        return wrapper

    def _add(self, event: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.append(event)

    def _value(self, value: Any, origin: str) -> Any:
        if self._future(value):
            self.watch(value)
            try:
                value._snapshot_origin = origin
            except (AttributeError, TypeError):
                pass
            return "<future>"
        if type(value).__name__.endswith("Client"):
            self.watch(value)
            return "<client>"
        return self.norm.value(_plain(value), "s")

    def restore(self) -> None:
        for cls, name, original in reversed(self._patched):
            if original is None:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
        self._patched.clear()
        self._seen.clear()


def _plain(obj: Any) -> Any:
    """A JSON value for anything a client returns."""
    if hasattr(obj, "model_dump"):
        dump = dict(obj.model_dump(mode="json"))
        for name in dir(type(obj)):  # public properties (an op result's metrics, ...)
            if name.startswith(("_", "model_")) or name in dump:
                continue
            if isinstance(inspect.getattr_static(type(obj), name, None), property):
                try:
                    dump[name] = getattr(obj, name)
                except Exception:  # noqa: BLE001 - a property that cannot answer is left out
                    continue
        return _plain(dump)
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if hasattr(obj, "value") and isinstance(obj.value, str):  # an Enum
        return obj.value
    return "<object>"


def compare_events(
    recorded: list[dict[str, Any]], got: list[dict[str, Any]], tolerances: dict[str, Any]
) -> list[str]:
    """The differences between two tests' event lists, event by event."""
    lines: list[str] = []
    for index in range(max(len(recorded), len(got))):
        if index >= len(got):
            lines.append(f"event {index} ({recorded[index]['call']}): missing")
            continue
        if index >= len(recorded):
            lines.append(f"event {index} ({got[index]['call']}): not recorded")
            continue
        lines += compare.diff(recorded[index], got[index], tolerances, path=f"event {index}")
    return lines
