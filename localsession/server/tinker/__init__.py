"""The Tinker dialect: the ``/api/v1/...`` endpoints of Thinking Machines' ``tinker`` SDK,
served by ``localsession serve`` on the same port and over the same runtime as the SageMaker
front end (docs/tinker.md).

- dialect.py: Tinker's models, futures, samplers and checkpoints mapped onto the runtime;
- codec.py: the protobuf (+zstd) bodies, read with the installed ``tinker`` package's own
  message classes (imported on first use, so the dialect is optional);
- routes.py / rest.py / session_index.py: the HTTP handlers of ``/api/v1``;
- oai.py: the OpenAI-compatible ``/oai/api/v1`` routes, with models named as Tinker names them.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from localsession.runtime.service import Service

__all__ = ["mount"]


def mount(service: Service) -> list[BaseRoute]:
    """The Tinker routes over ``service`` (one dialect state per app)."""
    from localsession.server.tinker.dialect import Dialect
    from localsession.server.tinker.oai import routes as oai_routes
    from localsession.server.tinker.routes import routes as tinker_routes

    dialect = Dialect(service)
    return [*tinker_routes(dialect), *oai_routes(dialect)]
