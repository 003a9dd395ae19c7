"""Shared test setup: offline Hugging Face, a sealed-off home, one in-process service.

Every test runs with ``LOCALSESSION_HOME``, ``LOCALSESSION_MODEL_MAP``, ``LOCALSESSION_CACHE``
and ``HF_HUB_CACHE`` pointing at temporary directories (set in the environment, so
subprocesses inherit them): no test reads a developer's ``~/.localsession/models.json`` or
Hugging Face cache, and none writes packages or session records under ``~/.localsession``.
The run fails if ``~/.localsession`` changed anyway. Shared helpers (the stub engine, the
running server, wire builders) live in ``tests/testkit.py``.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# ServiceClient needs a region, as the SDK does; the tests run where none is configured.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")


def _hide_the_test_directory_named_tinker() -> None:
    """Without the tinker SDK, ``import tinker`` would find ``tests/tinker`` (a directory on
    ``sys.path`` through ``tests/``) as a namespace package: ``importorskip("tinker")`` would
    pass and the dialect's tests fail to collect. Mark the SDK missing instead, so they skip
    (tests/test_packaging.py runs the collection with the SDK hidden)."""
    import importlib.util
    import sys

    try:
        spec = importlib.util.find_spec("tinker")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:  # absent, or only a namespace of directories
        sys.modules["tinker"] = None  # type: ignore[assignment]


_hide_the_test_directory_named_tinker()

import pytest  # noqa: E402

from localsession import ServiceClient  # noqa: E402
from localsession.runtime.service import Service, ServiceConfig  # noqa: E402
from localsession.wiring import build_service  # noqa: E402

ROLE = "arn:aws:iam::000000000000:role/localsession-tests"
#: The developer's real state directory, which the suite must leave as it found it.
REAL_HOME = Path.home() / ".localsession"


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file and directory under ``root``."""
    if not root.exists():
        return {}
    found = {".": (0, root.stat().st_mtime_ns)}
    for path in root.rglob("*"):
        stat = path.lstat()
        found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


_REAL_HOME_BEFORE = _snapshot(REAL_HOME)
_SCRATCH = Path(tempfile.mkdtemp(prefix="localsession-tests-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
# At import, before any fixture or test module builds a service: the defaults of every
# ServiceConfig, model map and HF-cache scan already point into the scratch directory.
os.environ["LOCALSESSION_HOME"] = str(_SCRATCH / "home")
os.environ["LOCALSESSION_MODEL_MAP"] = ""
os.environ["HF_HUB_CACHE"] = str(_SCRATCH / "hf-cache")
# The machine-wide cache of conversions and tokenizer exports: one for the whole run (shared
# by its subprocesses), never the developer's ~/.cache/localsession.
os.environ["LOCALSESSION_CACHE"] = str(_SCRATCH / "cache")


#: Tests that start processes or HTTP servers (the server, fuzz and security suites talk to
#: one), crash, load or soak, run examples or the launch post's loop, load a real model, or
#: run the conformance suite: marked ``integration`` here, in one list (whole directories
#: ending in ``/``, whole files, or single tests by node id). ``make test`` runs them;
#: ``make test-unit`` (``-m "not integration"``) runs the rest, in well under a minute.
INTEGRATION = (
    "cli/",  # each test runs the ``localsession`` command (or ``serve``) as a subprocess
    "server/",  # the unmodified SDK, boto3 and openai against a running server
    "tinker/",  # the unmodified tinker SDK against a loopback server or serve (conformance)
    "realmodel/test_smollm2.py",  # converts and trains the real SmolLM2-135M
    "realmodel/test_tokenizer_export.py",  # reads the real SmolLM2's tokenizer from its GGUF
    "realmodel/test_gguf_errors.py::test_truncated_gguf_names_the_file_and_the_cause",
    "realmodel/test_gguf_errors.py::test_locating_the_shipped_file_imports_neither_torch_nor_the_package",
    "differential/test_wire_timeout.py",
    "examples/test_run_home.py",
    "examples/test_interrupt.py",  # runs an example and interrupts it
    "examples/test_example_parts.py::test_code_rewards_pass_fail_and_no_code",  # sandbox runs
    "mock/test_mock_errors.py",  # against ``localsession serve``
    "mock/test_mock_sdk.py::test_blog_grpo_in_the_mock_equals_serve",
    "mock/test_mock_sdk.py::test_blog_grpo_all_in_flight_matches_serve",
    "mock/test_mock_sdk.py::test_blog_loop_with_every_socket_refused",
    "mock/test_mock_plugin.py::test_fixture_in_a_subprocess",
    "mock/test_mock_lifecycle.py::test_imports_stay_light",
    "mock/test_mock_lifecycle.py::test_a_fake_mock_runs_the_blog_loop_without_torch",
    "runtime/test_persist_owners.py",
    "bench/test_bench_smoke.py",
    "conformance/test_plugin.py",
    "conformance/test_selfcheck.py",
    "conformance/test_selfcheck_tinker.py",
    "conformance/test_suite_passes.py",
    "examples/test_examples.py",
    "examples/test_sandbox.py",
    "fakes/test_fake_hygiene.py",
    "reliability/test_crash.py",
    "reliability/test_fuzz_client.py",
    "reliability/test_fuzz_names.py",
    "reliability/test_fuzz_runtime.py",
    "reliability/test_load.py",
    "reliability/test_security.py",
    "reliability/test_soak.py",
    "test_import_hygiene.py",
    "client/test_checkpoints.py::test_listing_latest_and_delete",
    "runtime/test_registry.py::test_a_killed_writer_leaves_no_package_and_no_corrupt_index",
    "runtime/test_registry.py::test_opening_a_home_sweeps_only_writes_whose_process_is_gone",
    "test_isolation.py::test_subprocesses_inherit_the_isolation",
    "test_vocab.py::test_vocab_imports_nothing_heavy",
)
_FOLDERS = tuple(entry for entry in INTEGRATION if entry.endswith("/"))
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.relative_to(_TESTS).as_posix() if item.path.is_relative_to(_TESTS) else ""
        test = f"{path}::{item.originalname}" if hasattr(item, "originalname") else path
        if path in INTEGRATION or test in INTEGRATION or path.startswith(_FOLDERS):
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection loaded (torch, transformers, botocore's models, every test
    module) out of the garbage collector's reach: the ``gc.collect()`` each engine runs as it
    closes then scans only what tests made, 0.2 s less per closed engine, and nothing a test
    creates is exempt from collection."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Each test: a fresh ``LOCALSESSION_HOME`` and empty ``HF_HUB_CACHE``, no model map.
    Returns the home. (The process-wide default service keeps the home it was made with.)"""
    root = tmp_path_factory.mktemp("isolated")
    monkeypatch.setenv("LOCALSESSION_HOME", str(root / "home"))
    monkeypatch.setenv("LOCALSESSION_MODEL_MAP", "")
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hf-cache"))
    return root / "home"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test touched the developer's ``~/.localsession``."""
    after = _snapshot(REAL_HOME)
    if after != _REAL_HOME_BEFORE:
        changed = sorted(set(after.items()) ^ set(_REAL_HOME_BEFORE.items()))
        session.config.get_terminal_writer().line(
            f"FAILED: the test run changed {REAL_HOME}: {[p for p, _ in changed][:10]}",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def decode_steps() -> Iterator[list[int]]:
    """The decode steps each sampler batch ran during the test, one entry per batch (the torch
    sampler's step hook; the batch's entry grows as it runs)."""
    from localsession.engine import sampling

    counts: list[int] = []

    def hook(done: int) -> None:
        if done == 1:
            counts.append(0)
        counts[-1] = done

    remove = sampling.add_step_hook(hook)
    yield counts
    remove()


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for the whole run (sessions share it, as on the real service)."""
    home = tmp_path_factory.mktemp("localsession-home")
    svc = build_service(ServiceConfig(max_sessions=64, gap_timeout=0.0, home=home))
    yield svc
    svc.close()


@pytest.fixture
def client(service: Service) -> ServiceClient:
    return ServiceClient(role_arn=ROLE, backend=service)


@pytest.fixture
def relaxed(service: Service) -> ServiceClient:
    return ServiceClient(role_arn=ROLE, backend=service, strict=False)
