"""A loopback localsession server for tests of code written against the ``tinker`` SDK.

The SDK builds its own HTTP client (pyqwest or httpx) from ``TINKER_BASE_URL`` inside its
client holder and offers no transport hook, so it cannot be served in-process the way
``localsession.mock()`` serves botocore: it gets a real server on ``127.0.0.1``, one per
engine per test session (:func:`shared`). The ``localsession_tinker`` fixture
(mocking/pytest_plugin.py) points ``TINKER_BASE_URL``, ``TINKER_API_KEY`` and the offline
Hugging Face cache at it for one test.

``engine="torch"`` runs the real engine on the built-in and listed models; ``engine="fake"``
runs the fakes' instant engine (any model name; scripted samples and the call log through
:attr:`TinkerServer.service`).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from localsession.mocking.core import Engine, Mock

#: The API key every local server accepts without ``--auth`` (the SDK wants a tml- prefix).
API_KEY = "tml-localsession"


class TinkerServer:
    """One service on a background loopback server: ``url``, ``service``, ``environment``."""

    def __init__(self, engine: Engine = "torch", home: Path | None = None) -> None:
        from localsession.server.runner import ServerThread

        self.engine = engine
        self._tmp = None if home is not None else tempfile.mkdtemp(prefix="localsession-tinker-")
        self.home = home if home is not None else Path(str(self._tmp))
        # The mock's service recipe (serve's choices, relaxed), without its botocore hooks.
        self.service: Any = Mock(engine=engine, home=self.home, strict=False)._build_service()
        # Each Tinker model is a runtime session; a test session makes many.
        self.service.config.max_sessions = max(self.service.config.max_sessions, 64)
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


_servers: dict[str, TinkerServer] = {}
_lock = threading.Lock()


def shared(engine: Engine = "torch") -> TinkerServer:
    """The test session's server for ``engine``, started on first use, stopped at exit."""
    with _lock:
        server = _servers.get(engine)
        if server is None:
            server = _servers[engine] = TinkerServer(engine)
            atexit.register(server.close)
        return server
