"""The Tinker dialect: the ``/api/v1/...`` endpoints of Thinking Machines' ``tinker`` SDK,
served by ``localsession serve`` on the same port and over the same runtime as the SageMaker
front end (docs/tinker.md).

- dialect.py: Tinker's models, futures, samplers and checkpoints mapped onto the runtime,
  composing the owners of its state (heartbeats.py, model_table.py, future_table.py,
  sampler_table.py, checkpoints.py, stability.py, session_index.py), each with its data and
  lock, and the logic over them (numbering.py, samplers.py). It calls the runtime only
  through ``Service``'s typed calls and ``Service.control`` (runtime/control.py);
- codec.py: the protobuf (+zstd) bodies, read with the installed ``tinker`` package's own
  message classes (imported on first use, so the dialect is optional);
- routes.py / rest.py / session_index.py: the HTTP handlers of ``/api/v1``;
- oai.py: the OpenAI-compatible ``/oai/api/v1`` routes, with models named as Tinker names them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

from localsession.runtime.service import Service

if TYPE_CHECKING:
    from localsession.server.tinker.dialect import Dialect

__all__ = ["mount", "new_dialect"]


def mount(service: Service, dialect: Dialect | None = None) -> list[BaseRoute]:
    """The Tinker routes over ``service`` (one dialect state per app: ``dialect``, or a new
    one)."""
    from localsession.server.tinker.oai import routes as oai_routes
    from localsession.server.tinker.routes import routes as tinker_routes

    state = dialect if dialect is not None else new_dialect(service)
    return [*tinker_routes(state), *oai_routes(state)]


def new_dialect(service: Service) -> Dialect:
    """The Tinker dialect's state over ``service`` (the console reads its tables)."""
    from localsession.server.tinker.dialect import Dialect

    return Dialect(service)
