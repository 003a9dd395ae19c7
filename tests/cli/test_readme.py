"""The READMEs match the repository: every file they name exists, and the in-process snippet
prints what the README says it prints (issue 21, item 6). Every runnable README block runs in
``test_readme_blocks.py``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = [ROOT / "README.md", ROOT / "conformance" / "README.md", ROOT / "fakes" / "README.md"]
#: Names the READMEs use for files a command writes, not files of the repository. Only file
#: names with an extension are checked; directories are too often placeholders (RUN_DIR/).
OUTPUTS = {"COMPATIBILITY.md", "metrics.jsonl", "summary.json", "metrics.png", "package.json"}
#: ``make bench`` writes docs/performance.md (bench/perf_doc.py); the README links to it.
OUTPUTS |= {"docs/performance.md"}
_PATH_RE = re.compile(r"(?<![\w/.$<-])((?:[\w.-]+/)*[\w-]+\.(?:md|py|toml|xfail|txt))(?!\w)")


def _named(text: str) -> set[str]:
    names = set()
    for match in _PATH_RE.finditer(text):
        name = match.group(1)
        if name.startswith(("http", "www.", "s3/")) or name in OUTPUTS or "//" in name:
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_readme_names_exists(readme: Path) -> None:
    text = readme.read_text()
    spans = re.findall(r"`([^`\n]+)`|\]\(([^)]+)\)", text)
    candidates = {n for pair in spans for part in pair for n in _named(part)}
    # A path is read from the root or the README's folder; a bare file name (a test file a
    # README lists under its folder's heading) must exist somewhere in the repository.
    places = (ROOT, readme.parent)
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    bare = {Path(t).name for t in tracked}

    def exists(name: str) -> bool:
        return any((p / name).exists() for p in places) or ("/" not in name and name in bare)

    missing = sorted(n for n in candidates if not exists(n))
    assert not missing, f"{readme.relative_to(ROOT)} names files that do not exist: {missing}"


def _snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[: text.index("from localsession import AdamParams")]
    start = section.rindex("```python runnable\n") + len("```python runnable\n")
    section = text
    return section[start : section.index("\n```", start)]


@pytest.mark.slow
def test_the_in_process_snippet_runs_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LOCALSESSION_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _snippet()], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("step ")]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2] and losses[2] < 0.1, lines
    assert re.fullmatch(
        r"checkpoint: arn:aws:sagemaker:[a-z0-9-]+:000000000000:model-package/sagemaker-default/1",
        lines[3],
    ), lines
    assert lines[4] == "sample: ' fox jumps over the lazy dog.'", lines
