"""``make clean`` removes everything the setup and the runs make (each kind that .gitignore
lists), and nothing else: run on a scratch tree holding the repo's Makefile."""

from __future__ import annotations

import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

MADE = [
    ".venv/bin/python",
    ".pytest_cache/v/cache/nodeids",
    ".mypy_cache/3.11/x.json",
    ".ruff_cache/0.17.6/1",
    ".hypothesis/examples/ab/cd",
    "runs/demo-20261205-101010/metrics.jsonl",
    "localsession.egg-info/PKG-INFO",
    "build/lib/x.py",
    "dist/x.whl",
    "localsession/__pycache__/cli.cpython-311.pyc",
    "tests/server/__pycache__/conftest.cpython-311-pytest-8.pyc",
    "examples/stray.pyc",
]
KEPT = ["localsession/cli.py", "tests/server/conftest.py", ".git/HEAD", ".git/x/__pycache__/y"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_clean_removes_what_runs_make_and_keeps_the_sources(tmp_path: Path) -> None:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for name in MADE + KEPT:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True, timeout=60)
    left = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()} - {"Makefile"}
    assert left == set(KEPT)
    ignored = [line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()]
    for pattern in filter(None, ignored):  # every kind .gitignore names is made above
        assert any(fnmatch(part, pattern) for name in MADE for part in Path(name).parts), pattern
