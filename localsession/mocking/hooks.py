"""Process-wide state of the mocks: which are live, the botocore hook, and the environment.

Every live mock has its own endpoint host (``https://<id>.localsession.invalid``). One
``before-send`` handler, :func:`dispatch`, is registered with botocore while any mock is live
(in ``botocore.handlers.BUILTIN_HANDLERS``, so every session created meanwhile gets it, and
on boto3's default session if one already exists); it answers requests addressed to a live
mock's host (or a bucket sub-domain of it) and passes on everything else. A client built
inside a mock keeps talking to that mock, whichever mock is innermost later.

The environment (endpoint overrides, dummy credentials, home, model map, offline Hugging
Face) is the innermost live mock's. The variables the first mock found are saved, and the
last one to exit puts them back exactly, so nesting and mocks on several threads, exiting in
any order, leave nothing behind.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

HOST_SUFFIX = ".localsession.invalid"
_UNIQUE_ID = "localsession-mock-before-send"


class Target(Protocol):
    """What the dispatcher needs of a live mock."""

    host: str
    model_map: dict[str, str]

    def environment(self) -> dict[str, str | None]: ...

    def answer(self, request: Any, event_name: str = "") -> Any: ...


_lock = threading.RLock()
_live: list[Target] = []
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


def dispatch(request: Any, **kwargs: Any) -> Any:
    """botocore ``before-send``: a live mock's response, or None to let others answer."""
    url = getattr(request, "url", "")
    target = _owner(url)
    if target is not None:
        return target.answer(request, str(kwargs.get("event_name", "")))
    if urlsplit(url).hostname and str(urlsplit(url).hostname).endswith(HOST_SUFFIX):
        raise RuntimeError(
            f"{url}: this client was made inside a localsession.mock() that has exited; "
            "make clients inside the `with localsession.mock():` block that uses them"
        )
    return None


# -- botocore registration ----------------------------------------------------------------


def _install_hook() -> None:
    global _default_session
    from botocore import handlers

    handlers.BUILTIN_HANDLERS.append(("before-send", dispatch))
    boto3 = sys.modules.get("boto3")
    session = getattr(boto3, "DEFAULT_SESSION", None) if boto3 is not None else None
    if session is not None:  # made before the mock: it lacks the builtin handler
        session._session.register("before-send", dispatch, unique_id=_UNIQUE_ID)
        _default_session = session


def _remove_hook() -> None:
    global _default_session
    from botocore import handlers

    handlers.BUILTIN_HANDLERS[:] = [h for h in handlers.BUILTIN_HANDLERS if h[1] is not dispatch]
    if _default_session is not None:
        _default_session._session.unregister("before-send", dispatch, unique_id=_UNIQUE_ID)
        _default_session = None


def hook_installed() -> bool:
    from botocore import handlers

    return any(h[1] is dispatch for h in handlers.BUILTIN_HANDLERS)


# -- environment ----------------------------------------------------------------------------

#: Settings libraries read once at import; patched beside the variable while a mock is live.
_IMPORT_TIME: dict[str, list[tuple[str, str, Callable[[str | None], Any]]]] = {
    "HF_HUB_OFFLINE": [
        ("huggingface_hub.constants", "HF_HUB_OFFLINE", lambda v: v not in (None, "", "0")),
    ],
    "HF_HUB_CACHE": [
        ("huggingface_hub.constants", "HF_HUB_CACHE", lambda v: v),
        ("huggingface_hub.constants", "HUGGINGFACE_HUB_CACHE", lambda v: v),
    ],
}


def _apply(env: dict[str, str | None]) -> None:
    """Set the innermost mock's variables (None unsets); remember what to restore."""
    for key, value in env.items():
        if key not in _saved_env:
            _saved_env[key] = os.environ.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
        for module_name, attr, convert in _IMPORT_TIME.get(key, []):
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


def live() -> list[Target]:
    with _lock:
        return list(_live)
