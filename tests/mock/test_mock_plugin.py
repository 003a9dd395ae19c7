"""The ``localsession_mock`` fixture, in a pytest run of its own (a subprocess via pytester),
and the ``pytest11`` entry point that makes it available after ``pip install``."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

PLUGIN = "localsession.mocking.pytest_plugin"

USER_TEST = """
import pytest
from sagemaker.train.training_session import AdamParams, ServiceClient

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"


@pytest.mark.localsession_mock(engine="fake")
def test_my_loop(localsession_mock):
    svc = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o")
    with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
        tc.optim_step(AdamParams(learning_rate=1e-3)).result()
    assert localsession_mock.calls.methods() == ["optim_step"]


def test_default_engine_options(localsession_mock):
    assert localsession_mock.engine == "torch"
"""


def _entry_point_installed() -> bool:
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def test_fixture_in_a_subprocess(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user_loop=USER_TEST)
    # Installed (pip install -e .): the entry point loads the plugin; else name it.
    load = [] if _entry_point_installed() else ["-p", PLUGIN]
    result = pytester.runpytest_subprocess(
        *load, "-p", "no:cacheprovider", "-q", "-o", "faulthandler_timeout=120"
    )
    result.assert_outcomes(passed=2)


def test_entry_point_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    points = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["pytest11"]
    assert points == {"localsession": PLUGIN}
