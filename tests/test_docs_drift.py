"""Docs that cannot drift from the code they describe.

- docs/architecture.md names exactly the modules ``localsession/port.py`` imports.
- Every repository file a module docstring under ``localsession/`` cites as ``docs/X.md`` or
  ``path/to/file.py`` exists (a citation of a file outside the repository fails).
- docs/development.md's tier sizes equal a collection of the suite (tests/tier_sizes.py):
  ``slow``, since collecting every test module takes 10-20 s on 2 cores.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _package_imports(path: Path) -> set[str]:
    """The ``localsession`` modules a file imports, by their name under the package."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "localsession":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("localsession."):
            names.add(node.module.split(".", 1)[1])  # type: ignore[union-attr]
    return names


def test_architecture_names_the_ports_imports() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    match = re.search(r"it imports nothing of the\s+package but (.+?)\s+\(", text)
    assert match, "the port's import sentence is gone from docs/architecture.md"
    named = set(re.findall(r"`([a-z_]+)`", match.group(1)))
    assert named == _package_imports(ROOT / "localsession" / "port.py")


#: A cited repository path: docs/X.md, a .py path with a directory, or a top-level X.md.
CITED = re.compile(
    r"(?<![\w/.])((?:docs|localsession|fakes|conformance|bench|tests|examples)/[\w/.-]+\.(?:md|py)"
    r"|[A-Z][A-Za-z_-]*\.md)"
)


def missing_citations(doc: str) -> list[str]:
    """The repository files ``doc`` cites that do not exist."""
    return [c.rstrip(".") for c in CITED.findall(doc) if not (ROOT / c.rstrip(".")).exists()]


def test_every_file_a_docstring_cites_exists() -> None:
    missing = []
    for path in sorted((ROOT / "localsession").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        missing += [f"{path.relative_to(ROOT)} cites {c}" for c in missing_citations(doc)]
    assert not missing


def test_the_citation_check_finds_a_missing_file() -> None:
    old = 'only the carrier differs (docs/wire.md#1, DESIGN.md "one wire path")'
    assert missing_citations(old) == ["DESIGN.md"]
    assert missing_citations("see README.md and localsession/nope/gone.py.") == [
        "localsession/nope/gone.py"
    ]


@pytest.mark.slow
def test_development_md_states_the_tier_sizes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "tier_sizes.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
