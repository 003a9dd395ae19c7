"""The composition root: the one module that names engine modules and default collaborators.

The runtime (``localsession.runtime``) knows engines only through the port
(:mod:`localsession.port`), and the engine (``localsession.engine``) knows nothing of the
runtime. This module puts the two together, and everything that builds a service asks it:

- :func:`build_service`: a :class:`Service` with the torch engine and the local catalog (or
  the catalog and settings given); the in-process ``ServiceClient``, ``serve`` and ``mock()``
  build theirs here, and so do the fakes (``engine="fake"``: their own engine factory, a
  hermetic catalog, torch never named);
- :func:`server_catalog`: the catalog ``serve`` and ``mock()`` resolve names with;
- :func:`listed_catalog`: a catalog of fixed names (``mock(engine="fake")``, the fakes);
- :func:`default_service`: the process-wide service in-process clients share.

The engine and ``transformers`` are imported only when a session starts or a tokenizer is
written, so ``import localsession`` stays free of torch.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from localsession.port import Engine, EngineSpec, ResolvedModel

if TYPE_CHECKING:
    from localsession.runtime.config import ServiceConfig
    from localsession.runtime.models.catalog import LocalCatalog, ModelCatalog, StaticCatalog
    from localsession.runtime.service import Service


def default_engine_factory(spec: EngineSpec) -> Engine:
    """The real engine for a session (torch is imported here, not before)."""
    from localsession.engine import create_engine

    return create_engine(spec)


def default_tokenizer_writer(model: ResolvedModel, directory: Path) -> None:
    """Write a resolved model's tokenizer files (transformers is imported here)."""
    from localsession.engine import write_tokenizer

    write_tokenizer(model, directory)


def server_catalog(
    home: Path,
    model_map: Mapping[str, str] | None = None,
    hf_cache: Path | None = None,
) -> LocalCatalog:
    """The catalog a server resolves names with: ``home/models.json``, the environment's map,
    then ``model_map`` (``--model-map``) entries; tokenizers are written by the engine.
    ``hf_cache``: the Hugging Face cache to read models from (default: the environment's
    now, fixed for the catalog's life)."""
    from localsession.runtime.models.catalog import LocalCatalog
    from localsession.runtime.models.sources import hf_hub_cache

    cache = hf_cache if hf_cache is not None else hf_hub_cache()
    return LocalCatalog(
        home,
        model_map=dict(model_map or {}),
        hf_cache=cache,
        tokenizer_writer=default_tokenizer_writer,
    )


def listed_catalog(
    names: Mapping[str, str] | list[str] | tuple[str, ...],
    *,
    accept_any: bool,
    write_tokenizers: bool = True,
) -> StaticCatalog:
    """A catalog of fixed names (a mapping: listed name -> target); ``accept_any``: any other
    name resolves too (to itself). Its tokenizers are written by the engine, unless
    ``write_tokenizers`` is False (the fakes: their tokenizer is pure Python, no files)."""
    from localsession.runtime.models.catalog import StaticCatalog

    writer = default_tokenizer_writer if write_tokenizers else None
    return StaticCatalog(names, accept_any=accept_any, tokenizer_writer=writer)


#: What runs a service's sessions: the torch engine, or a test double's engine (the fakes').
EngineKind = Literal["torch", "fake"]


def build_service(
    config: ServiceConfig | None = None,
    *,
    catalog: ModelCatalog | None = None,
    engine: EngineKind = "torch",
) -> Service:
    """A service: ``config`` (default: from the environment) and ``catalog``.

    ``engine="torch"``: the config's engine factory, filled in with the torch engine when it
    has none; the catalog defaults to the local one over ``config.home`` (tokenizers written
    by the engine). ``engine="fake"``: a test double's service (``fakes.FakeService``, and so
    ``mock(engine="fake")``); its engine factory must come in ``config`` (torch is never
    filled in), and the catalog defaults to a hermetic one (any name, resolved to itself, no
    tokenizer files, nothing read from ``~/.localsession`` or the Hugging Face cache).
    """
    from localsession.runtime.config import ServiceConfig
    from localsession.runtime.models.catalog import LocalCatalog
    from localsession.runtime.service import Service

    config = config if config is not None else ServiceConfig.from_env()
    if engine == "fake":
        if config.engine_factory is None:
            raise ValueError("build_service(engine='fake') needs config.engine_factory")
        if catalog is None:
            catalog = listed_catalog([], accept_any=True, write_tokenizers=False)
    elif config.engine_factory is None:
        config.engine_factory = default_engine_factory
    if catalog is None:
        catalog = LocalCatalog(config.home, tokenizer_writer=default_tokenizer_writer)
    return Service(config, catalog=catalog)


_default: Service | None = None
_default_lock = threading.Lock()


def default_service() -> Service:
    """The process-wide service the in-process clients share, configured from the env.

    In-process clients submit in sequence order synchronously, so the only gap they can leave
    is a number consumed by a request refused client-side; it is recorded lost at once
    (``gap_timeout=0``) instead of blocking the client's later ops.
    """
    from localsession.runtime.config import ServiceConfig

    global _default
    with _default_lock:
        if _default is None:
            _default = build_service(ServiceConfig.from_env(gap_timeout=0.0))
            # Let running ops finish and engines close before the interpreter tears down.
            atexit.register(_default.close)
        return _default
