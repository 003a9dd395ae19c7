"""The composition root: the one module that names engine modules and default collaborators.

The runtime (``localsession.runtime``) knows engines only through the port
(:mod:`localsession.port`), and the engine (``localsession.engine``) knows nothing of the
runtime. This module puts the two together, and everything that builds a service asks it:

- three named profiles, each building its frozen :class:`ServiceConfig` once:
  :func:`server_service` (``serve``, ``mock()``), :func:`inprocess_service` (the in-process
  ``ServiceClient``) and :func:`fake_service` (the fakes, ``mock(engine="fake")``: their own
  engine factory, a hermetic catalog, torch never named);
- :func:`build_service`: a service from an explicit config (tests, benches);
- :func:`server_catalog`: the catalog ``serve`` and ``mock()`` resolve names with;
- :func:`listed_catalog`: a catalog of fixed names (``mock(engine="fake")``, the fakes);
- :func:`default_service`: the process-wide service in-process clients share.

The engine and ``transformers`` are imported only when a session starts or a tokenizer is
written, so ``import localsession`` stays free of torch.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from localsession.engine_options import EngineOptions
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


def save_builtin_model(name: str, directory: Path) -> Path:
    """Write built-in model ``name`` and its tokenizer as a Hugging Face directory (for a
    third-party server to load; conformance/peers)."""
    from localsession.engine.builtin import save_builtin

    return save_builtin(name, directory)


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


#: Seconds a missing sequence number blocks later ops, for in-process clients (the
#: in-process profile and the fakes): they submit in sequence order synchronously, so the only
#: gap they can leave is a number consumed by a request refused client-side; it is recorded
#: lost at once instead of blocking the client's later ops.
INPROCESS_GAP_TIMEOUT = 0.0

#: Sessions a fake service holds at once by default: a test suite's fakes make many.
FAKE_MAX_SESSIONS = 64


@dataclass(frozen=True)
class ServerOptions:
    """What the user of a server chooses: ``serve``'s flags, ``mock()``'s arguments. ``None``:
    the ``LOCALSESSION_*`` variable, else the default (runtime/config.py)."""

    home: Path | None = None
    strict: bool = True
    region: str | None = None
    #: Listed names -> local models (``--model-map``), after the environment's map.
    model_map: Mapping[str, str] = field(default_factory=dict)
    max_sessions: int | None = None
    gap_timeout: float | None = None
    #: Seconds of inactivity before a session becomes Expired (``--idle-timeout``).
    idle_timeout: float | None = None
    lenient_sequence: bool = False
    max_queued_ops: int | None = None
    #: Seconds without a heartbeat before a Tinker session expires (``--heartbeat-timeout``).
    heartbeat_timeout: float | None = None
    #: Where the local Hub exports tokenizers (default ``home/hf-hub``; the mocks share one).
    hub_cache: Path | None = None
    #: The engine's settings; ``None``: the ``LOCALSESSION_*`` variables
    #: (:meth:`EngineOptions.from_env`).
    engine: EngineOptions | None = None


def server_service(options: ServerOptions, *, catalog: ModelCatalog | None = None) -> Service:
    """The server profile (``localsession serve``, ``mock()`` with the torch engine): the
    user's options over ``LOCALSESSION_*`` defaults; every session's record is kept
    (runtime/sessions/persist.py), since a server outlives its sessions' engines; and no remote
    caller may name a path on this machine as a base model. ``catalog``: one already built
    (``serve`` checks its ``--model-map`` before binding); default: :func:`server_catalog`."""
    from localsession.runtime.config import ServiceConfig

    given = {
        "home": options.home.expanduser() if options.home is not None else None,
        "region": options.region,
        "max_sessions": options.max_sessions,
        "gap_timeout": options.gap_timeout,
        "idle_timeout": options.idle_timeout,
        "max_queued_ops": options.max_queued_ops,
        "heartbeat_timeout": options.heartbeat_timeout,
        "hub_cache": options.hub_cache,
        "engine_options": options.engine,
    }
    config = ServiceConfig.from_env(
        strict=options.strict,
        lenient_sequence=options.lenient_sequence,
        persist_sessions=True,
        local_model_paths=False,
        engine_factory=default_engine_factory,
        **{key: value for key, value in given.items() if value is not None},
    )
    if catalog is None:
        catalog = server_catalog(config.home, options.model_map)
    return _service(config, catalog)


def inprocess_service(*, home: Path | None = None, max_sessions: int | None = None) -> Service:
    """The in-process profile (``ServiceClient()`` without a backend): ``LOCALSESSION_*``
    defaults, the torch engine, the local catalog over the home, and a refused sequence number
    lost at once (:data:`INPROCESS_GAP_TIMEOUT`). ``home``/``max_sessions``: a private
    service's (the conformance backend's), instead of the environment's."""
    from localsession.runtime.config import ServiceConfig
    from localsession.runtime.models.catalog import LocalCatalog

    given = {"home": home, "max_sessions": max_sessions}
    config = ServiceConfig.from_env(
        gap_timeout=INPROCESS_GAP_TIMEOUT,
        engine_factory=default_engine_factory,
        **{key: value for key, value in given.items() if value is not None},
    )
    return _service(config, LocalCatalog(config.home, tokenizer_writer=default_tokenizer_writer))


def fake_service(
    engine_factory: Callable[[EngineSpec], Engine],
    catalog: ModelCatalog | None = None,
    *,
    home: Path,
    strict: bool = True,
    max_sessions: int | None = None,
    region: str | None = None,
    hub_cache: Path | None = None,
    check_create_members: bool = False,
) -> Service:
    """The test doubles' profile (``fakes.FakeService``, so ``mock(engine="fake")``): their
    ``engine_factory`` (torch is never filled in), nothing read from the environment, a
    refused sequence number lost at once (:data:`INPROCESS_GAP_TIMEOUT`) and no sampling
    gather window (the fake engines are instant). ``catalog``: default a hermetic one (any
    name, resolved to itself, no tokenizer files, nothing read from ``~/.localsession`` or the
    Hugging Face cache). ``max_sessions``: default :data:`FAKE_MAX_SESSIONS`.
    ``check_create_members``: check creates against botocore's model
    (0.1-0.5 s on the first; off by default, the light fakes' requests come from their own
    client)."""
    from localsession.runtime.config import DEFAULT_REGION, ServiceConfig

    config = ServiceConfig(
        home=home,
        region=region if region is not None else DEFAULT_REGION,
        strict=strict,
        max_sessions=max_sessions if max_sessions is not None else FAKE_MAX_SESSIONS,
        gap_timeout=INPROCESS_GAP_TIMEOUT,
        engine_factory=engine_factory,
        gather_quiet_s=0.0,
        check_create_members=check_create_members,
        hub_cache=hub_cache,
        engine_options=EngineOptions(),  # nothing read from the environment
    )
    if catalog is None:
        catalog = listed_catalog([], accept_any=True, write_tokenizers=False)
    return _service(config, catalog)


def build_service(
    config: ServiceConfig | None = None, *, catalog: ModelCatalog | None = None
) -> Service:
    """A service from an explicit ``config`` (default: from the environment), for tests and
    benches that set their own knobs; the named profiles above are what the doors use. The
    torch engine is filled in when ``config`` has no engine factory, and the environment's
    engine options when it has none (in a copy: the caller's config is frozen and stays as
    it was); the catalog defaults to the local one over
    ``config.home`` (tokenizers written by the engine)."""
    from localsession.runtime.config import ServiceConfig
    from localsession.runtime.models.catalog import LocalCatalog

    config = config if config is not None else ServiceConfig.from_env()
    if config.engine_factory is None:
        config = dataclasses.replace(config, engine_factory=default_engine_factory)
    if config.engine_options is None:
        config = dataclasses.replace(config, engine_options=EngineOptions.from_env())
    if catalog is None:
        catalog = LocalCatalog(config.home, tokenizer_writer=default_tokenizer_writer)
    return _service(config, catalog)


def _service(config: ServiceConfig, catalog: ModelCatalog) -> Service:
    from localsession.runtime.service import Service

    return Service(config, catalog=catalog)


_default: Service | None = None
_default_lock = threading.Lock()


def default_service() -> Service:
    """The process-wide service the in-process clients share (:func:`inprocess_service`)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = inprocess_service()
            # Let running ops finish and engines close before the interpreter tears down.
            atexit.register(_default.close)
        return _default
