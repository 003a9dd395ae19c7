"""docs/configuration.md's table of ``LOCALSESSION_*`` variables cannot drift from the code.

- The table in the doc is exactly what ``python -m localsession.settings`` generates (run as a
  subprocess, as a user would; ``--check`` exits 1 on a doc edited by hand).
- Every ``LOCALSESSION_*`` name written anywhere in the repository's code, docs and Makefile
  is a listed variable, so a new variable without a table row fails here.
- Every listed variable is still named somewhere outside the list (none is stale).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from localsession import settings

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"LOCALSESSION_[A-Z][A-Z0-9_]*[A-Z0-9]")
#: Where names are searched: the code, tests, benches, docs and the Makefile.
SEARCHED = ("localsession", "fakes", "conformance", "tests", "bench", "examples", "docs")
#: Files that name variables only to list them, or only as this test's own example.
LISTS = {Path("localsession/settings.py"), Path("localsession/engine_options.py")}


def _files() -> list[Path]:
    found = [ROOT / "Makefile", ROOT / "README.md"]
    for top in SEARCHED:
        found += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".toml")]
    return [p for p in found if p.is_file()]


def _names_in(paths: list[Path]) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in paths:
        for name in NAME.findall(path.read_text(encoding="utf-8", errors="replace")):
            names.setdefault(name, path.relative_to(ROOT))
    return names


def test_the_doc_holds_the_generated_table() -> None:
    doc = (ROOT / settings.DOC).read_text(encoding="utf-8")
    assert settings.render(doc) == doc, "run python -m localsession.settings --write"
    checked = subprocess.run(
        [sys.executable, "-m", "localsession.settings", "--root", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_check_fails_on_a_hand_edited_table(tmp_path: Path) -> None:
    doc = (ROOT / settings.DOC).read_text(encoding="utf-8")
    (tmp_path / "docs").mkdir()
    edited = doc.replace("| `LOCALSESSION_THREADS` | auto |", "| `LOCALSESSION_THREADS` | 8 |")
    assert edited != doc
    (tmp_path / settings.DOC).write_text(edited, encoding="utf-8")
    assert settings.main(["--root", str(tmp_path)]) == 1
    assert settings.main(["--root", str(tmp_path), "--write"]) == 0
    assert (tmp_path / settings.DOC).read_text(encoding="utf-8") == doc


def test_every_variable_the_repository_names_is_in_the_table() -> None:
    listed = {v.name for v in settings.VARIABLES}
    named = _names_in([p for p in _files() if p.relative_to(ROOT) not in LISTS])
    missing = {name: str(path) for name, path in named.items() if name not in listed}
    assert not missing, f"add these to localsession/settings.py (and --write the doc): {missing}"
    stale = listed - set(named)
    assert not stale, f"listed but named nowhere else: {sorted(stale)}"


def test_every_row_is_filled_and_unique() -> None:
    names = [v.name for v in settings.VARIABLES]
    assert len(names) == len(set(names))
    for v in settings.VARIABLES:
        assert v.default and v.accepted and v.purpose.endswith("."), v.name
        assert v.scope in ("engine", "service", "tooling"), v.name
