"""The suite's own hygiene: every test runs on temporary state, never the developer's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from localsession.runtime.models.catalog import LocalCatalog
from localsession.runtime.models.sources import hf_hub_cache, localsession_home
from localsession.runtime.service import ServiceConfig

REAL_HOME = Path.home() / ".localsession"


def test_defaults_point_at_temporary_directories(isolated_home: Path) -> None:
    assert localsession_home() == isolated_home
    assert ServiceConfig().home == isolated_home != REAL_HOME
    assert LocalCatalog().model_map() == {}  # no models.json there, an empty env map
    assert not hf_hub_cache().exists() or not any(hf_hub_cache().iterdir())


def test_subprocesses_inherit_the_isolation(isolated_home: Path) -> None:
    code = (
        "from localsession.runtime.models.sources import localsession_home; "
        "print(localsession_home())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env=dict(os.environ), timeout=600,
    )  # fmt: skip
    assert Path(out.stdout.strip()) == isolated_home
