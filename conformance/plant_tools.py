"""What the Tinker self-checks (selfcheck_tinker.py, selfcheck_tinker_spec.py) plant with.

Tools both planting modules share, kept here so that neither imports the other:
:func:`bodies`, which lets a defect edit the JSON body of one endpoint before the dialect
reads it; :func:`editing`, a ``forward_backward`` that runs edited datums; and
:data:`ORIGINAL`, the dialect's unbroken functions, taken once before anything is planted so
that a patched function can still call the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

#: The unbroken dialect functions by name (filled by :func:`remember_originals`).
ORIGINAL: dict[str, Callable[..., Any]] = {}


def remember_originals() -> None:
    """Record the dialect's unbroken functions, the first time only (later calls may come
    while something is planted)."""
    from localsession.server.tinker import codec
    from localsession.server.tinker.dialect import Dialect

    if not ORIGINAL:
        ORIGINAL.update(
            forward_backward=Dialect.forward_backward,
            optim_step=Dialect.optim_step,
            load=Dialect.load,
            encode_sample_response=codec.encode_sample_response,
        )


def bodies(endpoint: str, edit: Callable[[dict[str, Any]], None]) -> Any:
    """Patch the routes' body reader so that ``edit`` sees each JSON body of ``endpoint``."""
    from localsession.server.tinker import routes

    original = routes.body_json

    async def read(request: Any) -> dict[str, Any]:
        body = await original(request)
        if request.url.path.endswith(endpoint):
            edit(body)
        return body

    return mock.patch.object(routes, "body_json", read)


Shapes = list[dict[str, list[int]]]


def editing(edit: Callable[[list[Any], Shapes], tuple[list[Any], Shapes]]) -> Any:
    """A ``Dialect.forward_backward`` that runs what ``edit(datums, shapes)`` returns."""

    def patched(self: Any, *head: Any) -> Any:
        *fixed, datums, shapes = head  # model id, seq id, loss, config, forward-only
        return ORIGINAL["forward_backward"](self, *fixed, *edit(datums, shapes))

    return patched
