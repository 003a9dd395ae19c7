"""A loopback localsession server for tests of code written against the ``tinker`` SDK.

The SDK builds its own HTTP client (pyqwest or httpx) from ``TINKER_BASE_URL`` inside its
client holder and offers no transport hook, so it cannot be served in-process the way
``localsession.mock()`` serves botocore: it gets a real server on ``127.0.0.1``, one per
engine per test session (:func:`shared`). The ``localsession_tinker`` fixture
(mocking/pytest_plugin.py) points ``TINKER_BASE_URL``, ``TINKER_API_KEY`` and the offline
Hugging Face cache at it for one test.

``engine="torch"`` runs the real engine on the built-in and listed models; ``engine="fake"``
runs the fakes' instant engine (any model name; scripted samples and the call log through
:attr:`TinkerServer.service`). ``model_map`` lists more names, as ``serve --model-map`` does
(``{"Qwen/Qwen3-4B-Instruct-2507": "localsession/tiny"}``: code that picks a renderer by the
model's name, like tinker-cookbook, then runs on a tiny model). The built-ins' and mapped
names' tokenizers are in the offline HF cache before the first request, so
``get_tokenizer(name)`` works before a training client exists.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localsession.mocking.core import Engine, Mock
from localsession.runtime.models.catalog import BUILTIN_MODELS

#: The API key every local server accepts without ``--auth`` (the SDK wants a tml- prefix).
API_KEY = "tml-localsession"
#: Sessions one server holds at once: each Tinker model is a runtime session.
SESSIONS = 64


class TinkerServer:
    """One service on a background loopback server: ``url``, ``service``, ``environment``."""

    def __init__(
        self,
        engine: Engine = "torch",
        home: Path | None = None,
        model_map: Mapping[str, str] | None = None,
    ) -> None:
        from localsession.runtime.models import hub
        from localsession.server.hosting import ServerThread

        self.engine = engine
        self._tmp = None if home is not None else tempfile.mkdtemp(prefix="localsession-tinker-")
        self.home = home if home is not None else Path(str(self._tmp))
        # The mock's service recipe (serve's choices, relaxed), without its botocore hooks.
        mock = Mock(engine=engine, home=self.home, strict=False, model_map=model_map)
        # Each Tinker model is a runtime session; a test session makes many.
        self.service: Any = mock._build_service(max_sessions=SESSIONS)
        # Before the first request, as serve does on a background thread: the tokenizers of
        # the built-ins and mapped names (a shipped GGUF's, converted in seconds, is exported
        # by its first get_info instead).
        catalog = self.service.catalog
        for name in [*BUILTIN_MODELS, *(model_map or {})]:
            hub.export_tokenizer(catalog, catalog.canonical_name(name), self.service.hub_cache)
        self._thread = ServerThread(self.service)
        self.url = self._thread.start()

    def environment(self) -> dict[str, str]:
        """What a process running the tinker SDK needs to use this server, offline."""
        return {
            "TINKER_BASE_URL": self.url,
            "TINKER_API_KEY": API_KEY,
            "HF_HUB_CACHE": str(Path(self.service.hub_cache).resolve()),
            "HF_HUB_OFFLINE": "1",
        }

    def close(self) -> None:
        self._thread.stop()
        self.service.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


_servers: dict[tuple[str, tuple[tuple[str, str], ...]], TinkerServer] = {}
_lock = threading.Lock()


def shared(engine: Engine = "torch", model_map: Mapping[str, str] | None = None) -> TinkerServer:
    """The test session's server for ``engine`` and ``model_map``, started on first use,
    stopped at exit."""
    key = (engine, tuple(sorted((model_map or {}).items())))
    with _lock:
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = TinkerServer(engine, model_map=model_map)
            atexit.register(server.close)
        return server
