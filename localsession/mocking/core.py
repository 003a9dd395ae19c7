"""``localsession.mock()``: the unmodified SDK and plain boto3, in-process, with no sockets.

Inside the mock, ``sagemaker.train.training_session`` and boto3 clients for ``sagemaker``,
``sagemakertrainingsessionruntime`` (and S3, for artifacts) talk to a private localsession
service. Their requests never reach the network: a botocore ``before-send`` handler
(hooks.py) hands each one to the same ASGI app ``localsession serve`` runs (transport.py), so
the mock and the server answer byte for byte alike.

Usable as a context manager (``with localsession.mock() as m:``), as a decorator on a
function or a test class, and as the pytest fixture ``localsession_mock`` (pytest_plugin.py).
Each entry gets a fresh service and, unless ``home=`` is given, a fresh temporary home that
is removed on exit; the environment, the botocore handler and every thread the mock started
are gone after it exits, also after an exception.
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import os
import shutil
import sys
import tempfile
import threading
import unittest
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from localsession.mocking import fake_tokenizer, hooks, trace_file

Engine = Literal["torch", "fake"]
_F = TypeVar("_F", bound=Callable[..., Any])
_ids = itertools.count(1)
#: First imports of the server stack and the fakes happen under it: mocks started on several
#: threads at once would otherwise compile those modules concurrently, which CPython 3.11
#: (with an import hook that parses source, such as pytest's assertion rewriting) can fail.
_import_lock = threading.Lock()
#: The server's default long-poll (``localsession serve --long-poll``), so results arrive as
#: they do over HTTP.
LONG_POLL_S = 1.0


def _moto_active() -> bool:
    """Whether moto's ``mock_aws`` is on (its botocore stubber answers AWS hosts)."""
    models = sys.modules.get("moto.core.models")
    stubber = getattr(models, "botocore_stubber", None)
    return bool(getattr(stubber, "enabled", False))


def _join_shut_down_executors(timeout: float = 2.0) -> None:
    """Wait for the worker threads of thread pools already shut down (the SDK's submit loops
    close their executors when their clients are collected; the threads exit a moment
    later), so the mock's exit leaves no thread of that work behind."""
    import concurrent.futures.thread as pool

    for thread in threading.enumerate():
        if getattr(thread, "_target", None) is not pool._worker:
            continue
        ref = thread._args[0]  # type: ignore[attr-defined]
        executor = ref() if isinstance(ref, weakref.ref) else None
        if executor is None or getattr(executor, "_shutdown", False):
            thread.join(timeout)


class Mock:
    """One in-process localsession service the unmodified SDK talks to; see the module doc.

    ``engine``: ``"torch"`` (real models, the default) or ``"fake"`` (the fakes' instant
    engine: :attr:`script`, :attr:`calls`, :meth:`advance` and friends become available).
    ``model_map``: names the SDK may use, mapped to local models
    (``{"openai/gpt-oss-20b": "localsession/tiny"}``). ``home``: the state directory
    (default: a temporary one, removed on exit). ``strict``: the service limits (``False`` is
    ``serve --relaxed``). ``region``: the region the SDK and the ARNs use. ``manual``: start the
    fake engine's manual clock. ``replay``: a cassette of ``localsession record`` (a file,
    or the newest in a folder) to answer from instead of a service (localsession/parity/).
    ``trace``: a file the mock writes its ops' Chrome trace to on exit (docs/console.md).
    """

    def __init__(
        self,
        *,
        engine: Engine = "torch",
        model_map: Mapping[str, str] | None = None,
        home: str | os.PathLike[str] | None = None,
        strict: bool = True,
        region: str = "us-west-2",
        manual: bool = False,
        replay: str | os.PathLike[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
    ) -> None:
        self._options = {k: v for k, v in locals().items() if k != "self"}  # (for _fresh)
        if engine not in ("torch", "fake"):
            raise ValueError(f"engine={engine!r}: use 'torch' (real models) or 'fake'")
        bad = [k for k, v in (model_map or {}).items() if not (k and v) or "," in k + v]
        if bad:
            raise ValueError(
                f"model_map entries {bad!r}: names and targets must be non-empty, without commas"
            )
        if manual and engine != "fake":
            raise ValueError("manual=True needs engine='fake' (the fakes' clock)")
        self.engine: Engine = engine
        self.model_map: dict[str, str] = dict(model_map or {})
        self._home_option = Path(home).expanduser() if home is not None else None
        self.strict = strict
        self.region = region
        self._manual = manual
        self._replay = Path(replay).expanduser() if replay is not None else None
        self._trace = Path(trace).expanduser() if trace is not None else None
        #: The replay's :class:`~localsession.parity.replay.Replayer` (``replay=`` only).
        self.replayer: Any = None
        self.host = ""
        #: The thread that started it: clients made on that thread are bound to it.
        self.thread = 0
        self._mutex = threading.Lock()
        self._service: Any = None
        self._bridge: Any = None
        self._tmp: str | None = None
        self._env: dict[str, str | None] = {}

    # -- what the hooks need ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The endpoint the SDK is pointed at (a name that never resolves: nothing dials it)."""
        if not self.host:
            raise RuntimeError("this localsession.mock() is not active")
        return f"https://{self.host}"

    def environment(self) -> dict[str, str | None]:
        return self._env

    def answer(self, request: Any, event_name: str = "") -> Any:
        if event_name.startswith("before-send.s3.") and _moto_active():
            raise RuntimeError(
                "S3 conflict: moto's mock_aws was started inside localsession.mock(), but this "
                "S3 client was pointed at the localsession mock (AWS_ENDPOINT_URL_S3). Start "
                "mock_aws first (outside), and localsession.mock() leaves S3 to moto."
            )
        bridge = self._bridge
        if bridge is None:
            raise RuntimeError(f"{request.url}: the localsession mock it addresses has exited")
        return bridge.request(request.method, request.url, request.headers, request.body)

    # -- lifetime --------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        if self._home_option is not None:
            return self._home_option
        if self._tmp is None:
            raise RuntimeError("this localsession.mock() is not active")
        return Path(self._tmp)

    def _build_service(self, *, max_sessions: int | None = None) -> Any:
        """The mock's service: the wiring's server profile (as ``serve`` runs), or the fakes'
        (``engine="fake"``). ``max_sessions``: at least this many (``TinkerServer``)."""
        from localsession import wiring

        if self.engine == "fake":
            with _import_lock:
                from fakes.fake_service import FakeService  # torch: only for engine="fake"

            from localsession.runtime.models.catalog import BUILTIN_MODELS

            # Any name runs on the fake model; the built-ins and the map are listed, as by
            # serve, and the SDK's get_tokenizer() gets the built-in tokenizer they name.
            listed = {**{m: m for m in BUILTIN_MODELS}, **self.model_map}
            return FakeService(
                home=self.home,
                strict=self.strict,
                manual=self._manual,
                catalog=wiring.listed_catalog(listed, accept_any=True),
                region=self.region,
                hub_cache=hooks.shared_hub_cache(),
                max_sessions=max_sessions,
            )
        # Models are read from the user's HF cache as it is now (server_catalog), before the
        # mock points HF_HUB_CACHE at its own export cache (which holds tokenizers only).
        options = wiring.ServerOptions(
            home=self.home,
            strict=self.strict,
            region=self.region,
            model_map=self.model_map,
            max_sessions=max_sessions,
            hub_cache=hooks.shared_hub_cache(),
        )
        return wiring.server_service(options)

    def _environment(self, s3: bool) -> dict[str, str | None]:
        from localsession.server.endpoints import client_env

        env: dict[str, str | None] = dict(client_env(self.url, self.region))
        if s3:
            env.setdefault("AWS_ENDPOINT_URL_S3", self.url)
        else:  # moto serves S3: leave its endpoint as the user has it
            env.pop("AWS_ENDPOINT_URL_S3", None)
        env.update(
            {
                "LOCALSESSION_HOME": str(self.home),
                # Hermetic AWS settings: the user's profile, token and config files stay out
                # (an explicit profile would even make botocore skip the env credentials).
                "AWS_PROFILE": None,
                "AWS_DEFAULT_PROFILE": None,
                "AWS_SESSION_TOKEN": None,
                "AWS_CONFIG_FILE": str(self.home / "aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(self.home / "aws-credentials"),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                # The SDK's get_tokenizer() reads the tokenizers the mocks' Hub exports there.
                "HF_HUB_CACHE": str(hooks.shared_hub_cache()),
            }
        )
        return env

    def start(self) -> Mock:
        with self._mutex:
            if self.host:
                raise RuntimeError(
                    "this localsession.mock() is already active; nest a new localsession.mock()"
                )
            with _import_lock:
                from localsession.mocking.transport import AsgiBridge
                from localsession.server import endpoints  # noqa: F401 - client_env, below
                from localsession.server.app import create_app

            number = next(_ids)
            self.thread = threading.get_ident()
            self.host = f"mock-{number}-{os.getpid()}{hooks.HOST_SUFFIX}"
            try:
                if self._home_option is None:
                    self._tmp = tempfile.mkdtemp(prefix="localsession-mock-")
                else:
                    self._home_option.mkdir(parents=True, exist_ok=True)
                self._env = self._environment(s3=not _moto_active())
                # path-style S3, as against serve's IP: the app sees /bucket/key in both carriers
                (self.home / "aws-config").write_text(
                    "[default]\ns3 =\n    addressing_style = path\n"
                )
                if self._replay is not None:
                    from localsession.parity.replay import mock_app

                    cache = hooks.shared_hub_cache()
                    self.replayer, app = mock_app(self._replay, self.home, self.model_map, cache)
                else:
                    self._service = self._build_service()
                    app = create_app(self._service, long_poll=LONG_POLL_S)
                self._bridge = AsgiBridge(app, name=f"localsession-mock-{number}")
                hooks.activate(self)
                if self.engine == "fake":
                    fake_tokenizer.install()
            except BaseException:
                self._teardown()
                raise
        return self

    def stop(self) -> None:
        with self._mutex:
            if self.host:
                self._teardown()

    def _teardown(self) -> None:
        """Undo everything :meth:`start` did, in reverse, whatever state it reached."""
        if any(t.name.startswith("sagemaker-training-") for t in threading.enumerate()):
            # SDK clients nobody holds any more stop their sessions and join their submit
            # threads when collected: let that happen while the mock still answers.
            gc.collect()
        _join_shut_down_executors()
        hooks.deactivate(self)
        if not hooks.live():
            fake_tokenizer.uninstall()
        service, bridge = self._service, self._bridge
        self._service = self._bridge = None
        try:
            if service is not None:
                service.close()
                trace_file.write(service, self._trace)
        finally:
            if bridge is not None:
                bridge.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
            self.host = ""
            self._env = {}

    def __enter__(self) -> Mock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- decorator -------------------------------------------------------------------------

    def _fresh(self) -> Mock:
        return Mock(**self._options)

    def __call__(self, target: _F) -> _F:
        """Decorate a function (each call runs in a fresh mock) or a test class."""
        if isinstance(target, type):
            return self._decorate_class(target)  # type: ignore[return-value]
        if inspect.iscoroutinefunction(target):
            raise TypeError("localsession.mock() does not decorate coroutine functions")

        @functools.wraps(target)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return target(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def _decorate_class(self, cls: type) -> type:
        if issubclass(cls, unittest.TestCase):
            # setUp, the test and tearDown all run inside one mock, as moto does.
            original = cls.setUp
            options = self

            def set_up(test: unittest.TestCase) -> None:
                mock = options._fresh().start()
                test.addCleanup(mock.stop)
                original(test)

            cls.setUp = set_up  # type: ignore[method-assign,assignment]
            return cls
        for name, value in list(vars(cls).items()):
            if name.startswith("test") and inspect.isfunction(value):
                setattr(cls, name, self(value))
        return cls

    # -- the service and the fakes' controls ------------------------------------------------

    @property
    def service(self) -> Any:
        """The service behind the mock (a ``Service``, or a ``FakeService`` for the fake)."""
        if self._service is None:
            raise RuntimeError("this localsession.mock() is not active")
        return self._service

    @property
    def faults(self) -> Any:
        """Fault injection (runtime/faults.py), for either engine."""
        return self.service.faults

    def _fake(self, what: str) -> Any:
        if self.engine != "fake":
            raise RuntimeError(f"{what} needs localsession.mock(engine='fake')")
        return self.service

    @property
    def script(self) -> Any:
        """Scripted samples (fakes.Script): ``m.script.on_prompt(...)``, ``enqueue``, ..."""
        return self._fake("script").script

    @property
    def calls(self) -> Any:
        """Every runtime call the SDK made (fakes.CallLog)."""
        return self._fake("calls").calls

    def fail_next(self, kind: Any, count: int = 1, **options: Any) -> None:
        """Fail the next ``count`` ops of ``kind`` (``Faults.fail_next``), either engine."""
        self.faults.fail_next(kind, count, **options)

    def throttle_next(self, count: int = 1) -> None:
        self.faults.throttle_next(count)

    def expire_session(self, name: str) -> None:
        self.service.expire_session(name)

    @property
    def manual(self) -> bool:
        return bool(self._fake("the manual clock").manual)

    def set_manual(self, manual: bool) -> None:
        self._fake("the manual clock").set_manual(manual)

    def advance(self, n: int = 1) -> list[Any]:
        return list(self._fake("advance()").advance(n))

    def run_until_idle(self) -> list[Any]:
        return list(self._fake("run_until_idle()").run_until_idle())


def mock(
    *,
    engine: Engine = "torch",
    model_map: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    strict: bool = True,
    region: str = "us-west-2",
    manual: bool = False,
    replay: str | os.PathLike[str] | None = None,
    trace: str | os.PathLike[str] | None = None,
) -> Mock:
    """A localsession service the unmodified SDK talks to in-process; see :class:`Mock`."""
    return Mock(**locals())
