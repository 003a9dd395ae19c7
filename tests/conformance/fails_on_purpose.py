"""Conformance tests that fail or hang on purpose, for test_orphans.py. Not a test file of
the default run (its name does not start with ``test_``); test_orphans.py names it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

#: The file the hanging test creates once it holds (test_orphans.py waits for it).
MARKER = "ORPHAN_CHECK_MARKER"


def test_fails_after_using_the_server(service_client: Any) -> None:
    service_client.list_sessions()
    raise AssertionError("failing on purpose")


def test_hangs_until_stopped(service_client: Any) -> None:
    service_client.list_sessions()
    Path(os.environ[MARKER]).touch()
    threading.Event().wait()  # until the harness stops the run
