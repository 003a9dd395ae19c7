"""The trace a ``localsession.mock(trace=FILE)`` (or the ``localsession_mock`` fixture's
``trace`` option) writes on exit: every op the test ran, as Chrome trace-event JSON
(runtime/trace.py), for a CI job to keep as an artifact and open in ui.perfetto.dev.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from localsession.runtime.trace import chrome_trace


def write(service: Any, path: Path | None) -> None:
    """Write ``service``'s events to ``path`` (nothing when None), replacing the file whole
    (a temporary file renamed over it), its folder made if missing."""
    if path is None:
        return
    events = service.events.events()
    labels = {name: f"session {name}" for name in service.events.sessions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(chrome_trace(events, labels)), encoding="utf-8")
    os.replace(partial, path)
