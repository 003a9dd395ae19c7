"""Process-wide state of the mocks: which are live, the botocore hook, and the environment.

Every live mock has its own endpoint host (``https://<id>.localsession.invalid``). While any
mock is live, botocore gets two handlers (in ``botocore.handlers.BUILTIN_HANDLERS``, so every
session created meanwhile has them, and on boto3's default session if one already exists):

- ``creating-client-class``: a client whose endpoint is a mock's is bound, as it is made, to
  the innermost mock *of the thread that makes it* (else the process's innermost), through
  a ``before-send`` handler on that client alone. The endpoint variables are process-wide,
  so this is what keeps mocks on several threads apart;
- ``before-send`` (:func:`dispatch`): a request no bound handler answered, addressed to a
  live mock's host (or a bucket sub-domain of it), goes to that mock; anything else passes
  on (to moto, or the network).

A client keeps talking to the mock it was bound to, whichever mock is innermost later.

The environment (endpoint overrides, dummy credentials, home, model map, offline Hugging
Face) is the innermost live mock's. The variables the first mock found are saved, and the
last one to exit puts them back exactly, so nesting and mocks on several threads, exiting in
any order, leave nothing behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

HOST_SUFFIX = ".localsession.invalid"
_UNIQUE_ID = "localsession-mock-before-send"


class Target(Protocol):
    """What the dispatcher needs of a live mock."""

    host: str
    model_map: dict[str, str]
    thread: int

    def environment(self) -> dict[str, str | None]: ...

    def answer(self, request: Any, event_name: str = "") -> Any: ...


_lock = threading.RLock()
_live: list[Target] = []
_hub_cache: Path | None = None
_saved_env: dict[str, str | None] = {}
_saved_attrs: list[tuple[Any, str, Any]] = []
_default_session: Any = None


def _owner(url: str) -> Target | None:
    host = (urlsplit(url).hostname or "").lower()
    if not host.endswith(HOST_SUFFIX):
        return None
    with _lock:
        for target in reversed(_live):
            if host == target.host or host.endswith("." + target.host):
                return target
    return None


def _is_mock_host(url: str) -> bool:
    return str(urlsplit(url).hostname or "").lower().endswith(HOST_SUFFIX)


def _exited(request: Any, kwargs: dict[str, Any]) -> Any:
    from localsession.mocking.transport import gone

    return gone(getattr(request, "url", ""), str(kwargs.get("event_name", "")))


def _for_this_thread() -> Target | None:
    me = threading.get_ident()
    with _lock:
        mine = [t for t in _live if t.thread == me]
        return mine[-1] if mine else (_live[-1] if _live else None)


def _bound_send(ref: weakref.ReferenceType[Any], request: Any, **kwargs: Any) -> Any:
    target = ref()
    with _lock:
        alive = target is not None and target in _live
    request.localsession_answered = True
    if not alive:
        return _exited(request, kwargs)
    return target.answer(request, str(kwargs.get("event_name", "")))  # type: ignore[union-attr]


class _Bound:
    """Mixed into botocore client classes while a mock is live: see the module doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        meta = self.meta  # type: ignore[attr-defined]
        target = _for_this_thread() if _is_mock_host(meta.endpoint_url) else None
        if target is not None:
            meta.events.register_first(
                "before-send",
                functools.partial(_bound_send, weakref.ref(target)),
                unique_id=f"{_UNIQUE_ID}-bound",
            )


def bind_clients(base_classes: list[type], **kwargs: Any) -> None:
    """botocore ``creating-client-class``: add :class:`_Bound` to every client class."""
    if _Bound not in base_classes:
        base_classes.insert(0, _Bound)


def dispatch(request: Any, **kwargs: Any) -> Any:
    """botocore ``before-send``: a live mock's response, or None to let others answer."""
    if getattr(request, "localsession_answered", False):
        return None  # the client's own bound handler answered it
    url = getattr(request, "url", "")
    target = _owner(url)
    if target is not None:
        return target.answer(request, str(kwargs.get("event_name", "")))
    if _is_mock_host(url):
        return _exited(request, kwargs)
    return None


# -- botocore registration ----------------------------------------------------------------


def _install_hook() -> None:
    global _default_session
    from botocore import handlers

    handlers.BUILTIN_HANDLERS.append(("creating-client-class", bind_clients))
    handlers.BUILTIN_HANDLERS.append(("before-send", dispatch))
    boto3 = sys.modules.get("boto3")
    session = getattr(boto3, "DEFAULT_SESSION", None) if boto3 is not None else None
    if session is not None:  # made before the mock: it lacks the builtin handlers
        session._session.register(
            "creating-client-class", bind_clients, unique_id=f"{_UNIQUE_ID}-class"
        )
        session._session.register("before-send", dispatch, unique_id=_UNIQUE_ID)
        _default_session = session


def _remove_hook() -> None:
    global _default_session
    from botocore import handlers

    ours = (dispatch, bind_clients)
    handlers.BUILTIN_HANDLERS[:] = [h for h in handlers.BUILTIN_HANDLERS if h[1] not in ours]
    if _default_session is not None:
        _default_session._session.unregister(
            "creating-client-class", bind_clients, unique_id=f"{_UNIQUE_ID}-class"
        )
        _default_session._session.unregister("before-send", dispatch, unique_id=_UNIQUE_ID)
        _default_session = None


def hook_installed() -> bool:
    from botocore import handlers

    return any(h[1] in (dispatch, bind_clients) for h in handlers.BUILTIN_HANDLERS)


# -- environment ----------------------------------------------------------------------------

#: Settings libraries read once at import; patched beside the variable while a mock is live.
IMPORT_TIME: dict[str, list[tuple[str, str, Callable[[str | None], Any]]]] = {
    "HF_HUB_OFFLINE": [
        ("huggingface_hub.constants", "HF_HUB_OFFLINE", lambda v: v not in (None, "", "0")),
    ],
    "HF_HUB_CACHE": [
        ("huggingface_hub.constants", "HF_HUB_CACHE", lambda v: v),
        ("huggingface_hub.constants", "HUGGINGFACE_HUB_CACHE", lambda v: v),
    ],
    "HF_HOME": [("huggingface_hub.constants", "HF_HOME", lambda v: v)],
}


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, with the settings libraries read from
    them at import (:data:`IMPORT_TIME`), then put back what was there: how a test or a bench
    points an already-imported SDK at a server of its own."""
    saved = {key: os.environ.get(key) for key in values}
    attrs: list[tuple[Any, str, Any]] = []
    for key, value in values.items():
        os.environ[key] = value
        for module_name, attr, convert in IMPORT_TIME.get(key, []):
            module = sys.modules.get(module_name)
            if module is not None:
                attrs.append((module, attr, getattr(module, attr, None)))
                setattr(module, attr, convert(value))
    try:
        yield
    finally:
        for module, attr, old in reversed(attrs):
            setattr(module, attr, old)
        for key, old_value in saved.items():
            if old_value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old_value


def _apply(env: dict[str, str | None]) -> None:
    """Set the innermost mock's variables (None unsets); remember what to restore."""
    if env.get("HF_HOME") and "HF_HUB_CACHE" not in env:  # the hub cache lives under it
        env = {**env, "HF_HUB_CACHE": os.path.join(str(env["HF_HOME"]), "hub")}
    for key, value in env.items():
        if key not in _saved_env:
            _saved_env[key] = os.environ.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
        for module_name, attr, convert in IMPORT_TIME.get(key, []):
            module = sys.modules.get(module_name)
            if module is None or value is None:
                continue
            if not any(m is module and a == attr for m, a, _ in _saved_attrs):
                _saved_attrs.append((module, attr, getattr(module, attr, None)))
            setattr(module, attr, convert(value))


def _restore() -> None:
    for key, value in _saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _saved_env.clear()
    for module, attr, value in reversed(_saved_attrs):
        setattr(module, attr, value)
    _saved_attrs.clear()


# -- lifetime ---------------------------------------------------------------------------------

MODEL_MAP_ENV = "LOCALSESSION_MODEL_MAP"


def _original(key: str) -> str | None:
    return _saved_env[key] if key in _saved_env else os.environ.get(key)


def _wanted() -> dict[str, str | None]:
    """The innermost mock's variables; the model map is the user's own, then every live
    mock's, outermost first (a later entry wins), since the runtime reads it per request."""
    env = dict(_live[-1].environment())
    entries = [f"{k}={v}" for target in _live for k, v in target.model_map.items()]
    env[MODEL_MAP_ENV] = ",".join(filter(None, [_original(MODEL_MAP_ENV), *entries])) or None
    return env


def activate(target: Target) -> None:
    """Make ``target`` live and innermost: hook botocore (first mock) and set its env."""
    with _lock:
        if not _live:
            _install_hook()
        _live.append(target)
        try:
            _apply(_wanted())
        except BaseException:
            deactivate(target)
            raise


def deactivate(target: Target) -> None:
    """Retire ``target`` (wherever it is in the stack); the last one out restores all."""
    with _lock:
        if target in _live:
            _live.remove(target)
        if _live:
            env: dict[str, str | None] = {key: _original(key) for key in target.environment()}
            env.update(_wanted())
            _apply(env)
        else:
            _restore()
            _remove_hook()
            _drop_hub_cache()


def _drop_hub_cache() -> None:
    global _hub_cache
    if _hub_cache is not None:
        shutil.rmtree(_hub_cache, ignore_errors=True)
        _hub_cache = None


def shared_hub_cache() -> Path:
    """The Hugging Face cache every live mock's Hub exports tokenizers into: HF_HUB_CACHE is
    process-wide, so mocks on several threads must share it. Removed with the last mock."""
    global _hub_cache
    with _lock:
        if _hub_cache is None:
            _hub_cache = Path(tempfile.mkdtemp(prefix="localsession-mock-hf-"))
        return _hub_cache


def live() -> list[Target]:
    with _lock:
        return list(_live)
