"""A backend for test_limits.py: the fakes, declaring every capability but no session
limit, as ``--backend=http=URL`` declares none (``--backend=import:limitless:make``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.adapter import Backend
from conformance.backends.fakes import make_fakes


def make(options: dict[str, Any]) -> Backend:
    backend = make_fakes(options)
    backend.name = "limitless"
    backend.limits = dataclasses.replace(backend.limits, max_sessions=None)
    return backend
