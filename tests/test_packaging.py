"""Packaging traps, checked in a subprocess whose Python cannot import a package we name.

A ``sitecustomize.py`` on ``PYTHONPATH`` hides it: the real ``tinker`` SDK is looked up only
outside site-packages (so, as on a machine without the SDK, ``import tinker`` would find the
``tests/tinker`` directory as a namespace package, the trap itself), and ``pytest`` and
``hypothesis`` are marked missing in ``sys.modules``.

- Without the SDK the tinker dialect's tests collect cleanly, every module skipped: no
  collection error (tests/conftest.py marks a namespace-only ``tinker`` missing).
- ``localsession conformance`` without pytest prints one line naming
  ``pip install 'localsession[conformance]'`` and exits 2, no traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration

BLOCKER = '''
import importlib.machinery
import sys

HIDDEN_SDKS = {hidden_sdks!r}
for _name in {missing!r}:
    sys.modules[_name] = None  # import raises ModuleNotFoundError; find_spec answers None


class _OutsideSitePackages:
    """Finds a hidden SDK only where it is not installed: outside site-packages."""

    def find_spec(self, name, path=None, target=None):
        if name not in HIDDEN_SDKS:
            return None
        outside = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
        spec = importlib.machinery.PathFinder.find_spec(name, outside)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
        return spec


sys.meta_path.insert(0, _OutsideSitePackages())
'''


def _python(tmp_path: Path, hidden_sdks: set[str], missing: set[str]) -> dict[str, str]:
    """The environment of a Python that cannot import those packages."""
    site = tmp_path / "blocker"
    site.mkdir()
    text = BLOCKER.format(hidden_sdks=sorted(hidden_sdks), missing=sorted(missing))
    (site / "sitecustomize.py").write_text(text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env


def test_without_the_sdk_the_tinker_tests_skip_instead_of_failing(tmp_path: Path) -> None:
    env = _python(tmp_path, {"tinker", "tinker_cookbook"}, set())
    # the trap is real under the blocker: plain `import tinker` finds the test directory
    probe = "import tinker; print(list(tinker.__path__))"
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and str(ROOT / "tests" / "tinker") in shown.stdout, shown
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider"]
        + ["tests/tinker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert "error" not in out.lower(), out
    assert done.returncode in (0, 5), out  # collected (or nothing to collect), nothing broken
    # the modules that need the SDK skip; those that test the dialect's own classes still run
    needing = [
        path
        for path in (ROOT / "tests" / "tinker").glob("test_*.py")
        if 'importorskip("tinker")' in path.read_text(encoding="utf-8")
    ]
    assert needing, "no test module under tests/tinker asks for the tinker SDK"
    assert re.search(rf"collected \d+ items / {len(needing)} skipped", out), out


def test_conformance_without_pytest_names_the_extra(tmp_path: Path) -> None:
    env = _python(tmp_path, set(), {"pytest", "hypothesis"})
    done = subprocess.run(
        [sys.executable, "-m", "localsession", "conformance", "--backend", "fake"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("localsession conformance: error: ")
    assert "pytest" in lines[0] and "pip install 'localsession[conformance]'" in lines[0]
