"""The pytest plugin: ``pytest -p conformance.plugin --backend=... [conformance/suite]``.

- ``--backend`` picks the backend (see :mod:`conformance.backends`); the session-scoped
  ``backend`` fixture yields its :class:`~conformance.adapter.Backend`.
- ``@pytest.mark.requires("capability", ...)`` skips a test, naming the capability, on a
  backend that does not declare it. An unknown capability name stops the run.
- The backend's xfail file (``--xfail-file`` overrides it) marks known divergences as strict
  xfails; an entry naming a test that does not exist stops the run.
- ``--conformance-report out.json`` writes the backend's name, version, capabilities and every
  test's outcome (:mod:`conformance.report`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conformance import limits
from conformance.adapter import Backend, BackendUnavailable
from conformance.capabilities import CAPABILITIES, SPEC, check_names
from conformance.report import Recorder, suite_id

_BACKEND = pytest.StashKey[Backend]()
_UNAVAILABLE = pytest.StashKey[str]()
_RECORDER = pytest.StashKey[Recorder]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "training-session conformance suite")
    group.addoption(
        "--backend",
        default="inprocess",
        help="inprocess | http | http=URL | fakes | remote | tinker | import:module:factory",
    )
    group.addoption(
        "--capabilities",
        help="comma-separated capabilities to declare instead of the backend's own "
        "('all' or 'none' also work)",
    )
    group.addoption(
        "--drop-capability",
        action="append",
        default=[],
        metavar="NAME",
        help="treat the backend as not declaring NAME (repeatable)",
    )
    group.addoption("--xfail-file", type=Path, help="known divergences, instead of the backend's")
    group.addoption("--base-model", help="base model to create sessions on")
    group.addoption("--base-url", help="tinker backend: the server's URL (or TINKER_BASE_URL)")
    group.addoption(
        "--learning-rate",
        type=float,
        help="learning rate the suite trains with (default: the backend's, scaled to the model)",
    )
    group.addoption("--rank", type=int, help="LoRA rank of the sessions the suite creates")
    group.addoption(
        "--lora-alpha", type=int, help="LoRA alpha of SageMaker sessions (default: 2 x rank)"
    )
    group.addoption(
        "--numeric-stack",
        choices=("shared", "split"),
        help="tinker backend: one engine trains and samples (shared: tight logprob "
        "tolerances) or a separate sampler beside the trainer (split; the default with "
        "--base-url)",
    )
    group.addoption("--conformance-report", type=Path, metavar="OUT.json", help="write a report")
    group.addoption("--snapshot-update", type=Path, metavar="DIR", help="record snapshots")
    group.addoption("--snapshot-check", type=Path, metavar="DIR", help="compare with snapshots")
    group.addoption("--snapshot-report", type=Path, metavar="OUT.json", help="parity report")
    for key in ("region", "role", "base-model", "group", "s3"):
        group.addoption(f"--remote-{key}", help=f"remote backend: {key} (or CONFORMANCE_* env)")
    limits.add_options(group)  # the server's limits: --max-sessions, --gap-timeout, ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requires(*capabilities): needs these backend capabilities (else skipped)"
    )
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    recorder = Recorder()
    config.stash[_RECORDER] = recorder
    config.pluginmanager.register(recorder, "conformance-recorder")  # collects every report
    update, check = config.getoption("--snapshot-update"), config.getoption("--snapshot-check")
    if update is not None or check is not None:  # snapshot conformance (snapshots.py)
        from conformance.snapshot_plugin import SnapshotPlugin

        report = config.getoption("--snapshot-report")
        config.pluginmanager.register(SnapshotPlugin(update, check, report), "snapshots")


def _options(config: pytest.Config) -> dict[str, Any]:
    declared = config.getoption("--capabilities")
    capabilities: frozenset[str] | None = None
    if declared is not None:
        names = {n.strip() for n in declared.split(",") if n.strip()}
        if names == {"all"}:
            names = set(CAPABILITIES)
        elif names == {"none"}:
            names = set()
        check_names(names, "--capabilities")
        capabilities = frozenset(names)
    return {
        "capabilities": capabilities,
        "xfail_file": config.getoption("--xfail-file"),
        "base_model": config.getoption("--remote-base-model") or config.getoption("--base-model"),
        "base_url": config.getoption("--base-url"),
        "learning_rate": config.getoption("--learning-rate"),
        "rank": config.getoption("--rank"),
        "lora_alpha": config.getoption("--lora-alpha"),
        "numeric_stack": config.getoption("--numeric-stack"),
        "heartbeat_timeout": config.getoption("--heartbeat-timeout"),
        "idle_timeout": config.getoption("--idle-timeout"),
        "region": config.getoption("--remote-region"),
        "role": config.getoption("--remote-role"),
        "group": config.getoption("--remote-group"),
        "s3": config.getoption("--remote-s3"),
    }


def _start_backend(config: pytest.Config) -> Backend | None:
    if _BACKEND in config.stash:
        return config.stash[_BACKEND]
    if _UNAVAILABLE in config.stash:
        return None
    from conformance.backends import make_backend

    options = _options(config)
    dropped = config.getoption("--drop-capability")
    check_names(dropped, "--drop-capability")
    try:
        backend = make_backend(config.getoption("--backend"), options)
    except BackendUnavailable as exc:
        config.stash[_UNAVAILABLE] = str(exc)
        return None
    check_names(backend.capabilities, f"backend {backend.name!r} declares")
    if options["capabilities"] is not None:
        backend.capabilities = options["capabilities"]
    backend.capabilities = (backend.capabilities | SPEC) - set(dropped)  # spec is not declared
    if options["xfail_file"] is not None:
        backend.xfail_file = options["xfail_file"]
    tuned = {k: options[k] for k in ("learning_rate", "rank", "lora_alpha") if options[k]}
    if tuned:
        backend.limits = replace(backend.limits, **tuned)
    if options["base_model"] and not config.getoption("--remote-base-model"):
        backend.base_model = options["base_model"]
    backend.limits = limits.declared(config, backend.limits)
    config.stash[_BACKEND] = backend
    return backend


def read_xfail_file(path: Path) -> dict[str, str]:
    """``{test id: reason}`` from lines ``test_file.py::test_name[param]  # reason``."""
    entries: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, reason = line.partition("#")
        if "::" not in test_id:
            raise pytest.UsageError(f"{path}:{number}: expected `file.py::test  # reason`")
        entries[test_id.strip()] = reason.strip() or "known divergence"
    return entries


def _required(item: pytest.Item) -> list[str]:
    """The item's ``requires`` marks, plus the surface its directory is written against."""
    folder = Path(str(item.path)).parent.name
    surface = {"suite": ["surface.sagemaker"], "suite_tinker": ["surface.tinker"]}
    marked = [name for mark in item.iter_markers("requires") for name in mark.args]
    return surface.get(folder, []) + marked


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite = [item for item in items if "backend" in getattr(item, "fixturenames", ())]
    for item in suite:
        check_names(_required(item), f"{item.nodeid}: @pytest.mark.requires")
    if not suite:
        return
    backend = _start_backend(config)
    if backend is None:
        reason = f"backend unavailable: {config.stash[_UNAVAILABLE]}"
        for item in suite:
            item.add_marker(pytest.mark.skip(reason=reason))
        return
    for item in suite:
        missing = [name for name in _required(item) if not backend.has(name)]
        if missing:
            reason = f"backend {backend.name} does not declare capability " + ", ".join(
                repr(m) for m in missing
            )
            if "surface.sagemaker" in missing:  # say why, once per line
                reason += f" ({CAPABILITIES['surface.sagemaker']})"
            item.add_marker(pytest.mark.skip(reason=reason))
    if backend.xfail_file is not None:
        _apply_xfails(backend.xfail_file, suite)


def _apply_xfails(path: Path, suite: list[pytest.Item]) -> None:
    entries = read_xfail_file(path)
    by_id = {suite_id(item): item for item in suite}
    files = {key.split("::", 1)[0] for key in by_id}
    for test_id, reason in entries.items():
        item = by_id.get(test_id)
        if item is None:
            if test_id.split("::", 1)[0] in files:
                raise pytest.UsageError(f"{path}: {test_id!r} names no test of the suite")
            continue
        item.add_marker(pytest.mark.xfail(reason=f"known divergence: {reason}", strict=True))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """List every skipped test with its reason (a missing capability names it); then say,
    last and in red, that an unavailable backend means nothing was checked."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.when in ("setup", "call")]
    if _UNAVAILABLE in config.stash:  # one reason for every test: said once, last, below
        skipped = [r for r in skipped if "backend unavailable: " not in str(r.longrepr)]
    if skipped:
        terminalreporter.section(f"conformance: {len(skipped)} skipped, with reasons")
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            reason = reason.removeprefix("Skipped: ")
            terminalreporter.write_line(f"SKIP {report.nodeid.split('/')[-1]}: {reason}")
    ran = sum(len(terminalreporter.stats.get(k, [])) for k in ("passed", "failed", "xfailed"))
    hint = capability_hint(skipped, ran)
    if hint:
        terminalreporter.write_line(hint, yellow=True, bold=True)
    if _UNAVAILABLE in config.stash:
        terminalreporter.write_line(
            f"FAILED: backend unavailable: {config.stash[_UNAVAILABLE]}; no conformance test "
            "ran, so the run fails",
            red=True,
            bold=True,
        )


#: The marker of a skip for an undeclared capability (surface skips excluded).
UNDECLARED = "does not declare capability"


def capability_hint(skipped: list[Any], ran: int) -> str | None:
    """A hint when many of the tests that could run on this surface (a fifth, and at least
    five) skipped for capabilities the backend did not declare: a third party that does
    implement those local decisions should say so."""
    reasons = [str(r.longrepr[2]) if isinstance(r.longrepr, tuple) else "" for r in skipped]
    undeclared = [r for r in reasons if UNDECLARED in r and "surface." not in r]
    if len(undeclared) < max(5, 0.2 * (len(undeclared) + ran)):
        return None
    return (
        f"conformance: {len(undeclared)} tests skipped for capabilities the backend does not "
        f"declare ({ran} ran): they check localsession's local decisions, not the spec. "
        "If your server implements them, declare them with --capabilities=all or "
        "--capabilities=NAME,... (conformance/capabilities.py lists them; see "
        "conformance/README.md, Capabilities)"
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if _UNAVAILABLE in config.stash:  # every test skipped is not a pass: fail the run
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    out = config.getoption("--conformance-report")
    backend = config.stash.get(_BACKEND, None)
    if out is not None:
        config.stash[_RECORDER].write(
            out,
            backend,
            spec=config.getoption("--backend"),
            unavailable=config.stash.get(_UNAVAILABLE, None),
        )
    if backend is not None:
        backend.close()
        del config.stash[_BACKEND]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend under test."""
    found = _start_backend(request.config)
    if found is None:
        pytest.skip(f"backend unavailable: {request.config.stash[_UNAVAILABLE]}")
    return found


@pytest.fixture(scope="session")
def ts(backend: Backend) -> Any:
    """The public API module of the backend (``sagemaker.train.training_session`` or a
    drop-in with the same 36 names)."""
    return backend.ts


@pytest.fixture(scope="session")
def service_client(backend: Backend) -> Any:
    return backend.service_client()


@pytest.fixture
def new_training_client(backend: Backend, service_client: Any) -> Iterator[Callable[..., Any]]:
    """A factory for training clients on the backend's base model; every one is stopped at
    teardown. Keyword arguments go to ``create_lora_training_client``."""
    made: list[Any] = []

    def make(client: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("rank", backend.limits.rank)
        kwargs.setdefault("alpha", backend.limits.lora_alpha or 2 * kwargs["rank"])
        tc = (client or service_client).create_lora_training_client(backend.base_model, **kwargs)
        made.append(tc)
        return tc

    yield make
    for tc in made:
        try:
            tc.stop()
        except Exception:  # noqa: BLE001 - a test may have stopped or deleted it already
            pass


@pytest.fixture
def training_client(new_training_client: Callable[..., Any]) -> Any:
    """A fresh training session, stopped at teardown."""
    return new_training_client()


@pytest.fixture(scope="module")
def shared_training_client(backend: Backend, service_client: Any) -> Iterator[Any]:
    """One session for a module's read-only tests (forward, sampling from the base model,
    calls refused at the call site); never trained, saved or loaded."""
    rank = backend.limits.rank
    alpha = backend.limits.lora_alpha or 2 * rank
    tc = service_client.create_lora_training_client(backend.base_model, rank=rank, alpha=alpha)
    yield tc
    tc.stop()
