"""Built-in backends, chosen by ``--backend``: ``inprocess``, ``http``, ``http=URL``,
``fakes``, ``remote``, ``tinker`` (the Tinker API, backends/tinker.py), or
``import:package.module:factory`` for anyone's own adapter.

Each ``make_*`` returns a :class:`~conformance.adapter.Backend` (or raises
:class:`~conformance.adapter.BackendUnavailable`); its known divergences live next to it in
``<name>.xfail``. The imports run one way: this module imports a backend's module when that
backend is asked for, and the backends share what they need through ``backends/common.py``,
never through this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from conformance.adapter import Backend


def make_backend(spec: str, options: dict[str, Any]) -> Backend:
    """The backend ``spec`` names; ``options`` are the plugin's command-line settings."""
    kind, _, arg = spec.partition("=")
    if spec.startswith("import:"):
        module, _, attr = spec[len("import:") :].partition(":")
        factory: Callable[[dict[str, Any]], Backend] = getattr(
            importlib.import_module(module), attr or "make_backend"
        )
        return factory(options)
    if kind == "inprocess":
        from conformance.backends.inprocess import make_inprocess

        return make_inprocess(options)
    if kind == "fakes":
        from conformance.backends.fakes import make_fakes

        return make_fakes(options)
    if kind == "http":
        from conformance.backends.http import make_http

        return make_http(options, url=arg or None)
    if kind == "tinker":
        from conformance.backends.tinker import make_tinker

        return make_tinker(options)
    if kind == "remote":
        from conformance.backends.remote import make_remote

        return make_remote(options)
    import pytest

    raise pytest.UsageError(
        f"--backend={spec!r}: use inprocess, http, http=URL, fakes, remote, tinker or "
        "import:package.module:factory"
    )
