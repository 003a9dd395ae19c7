"""Every command the README shows is run (issue 49, item 5).

The convention: a fenced block whose info string ends in ``runnable`` (```` ```python
runnable ```` or ```` ```bash runnable ````) is executed by this test; ``runnable slow``
puts it in the slow tier. Each runs in a fresh virtualenv made here (``python -m venv``,
without pip), whose only packages are the checkout and the shared test environment's
site-packages, reached through one ``.pth`` file (nothing is downloaded or installed), in an
empty working directory with its own ``HOME`` and ``LOCALSESSION_HOME``. A ``python`` block is
run by that venv's interpreter; a ``bash`` block by ``bash -euo pipefail`` with the venv's
``bin`` first on ``PATH`` (where a ``localsession`` command is written). Every other
``python``/``bash``/``sh`` block must be listed in ``NOT_RUN`` with the test that runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import procio
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.M | re.S)
#: Blocks shown but not run here, by how their first line starts, and why.
NOT_RUN = {
    "make demo ": "`.ci/run` runs `make test` in a fresh clone; `make demo` is run by "
    "test_make_demo_runs_its_loop_in_the_set_up_venv (slow tier), one step long",
}
#: What a block prints, by a line of the block: the README says so next to it.
PRINTS = {
    'print("loss is positive:"': "loss is positive: True",
    "print(svc.list_base_models())": "'localsession/tiny'",
    "print(sorted(m.model_name": "'localsession/tiny'",
    'print("sample:"': "sample: ' fox jumps over the lazy dog.'",
}
#: A warning on stderr, from the ``warnings`` module (``file:line: FutureWarning: ...``) or a
#: logger (``WARNING ...``, ``... - WARNING - ...``): a README block must run without one.
WARNING_RE = re.compile(r"^.*(?:\b[A-Z]\w*Warning\b|\bWARNING\b).*$", re.M)
#: A loaded 2-core machine runs these at a small fraction of their idle speed.
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Block:
    lang: str
    slow: bool
    code: str
    line: int


def blocks(text: str) -> tuple[list[Block], list[Block]]:
    """(runnable, shown but not marked) python/bash/sh blocks of ``text``."""
    runnable, other = [], []
    for match in _FENCE.finditer(text):
        lang, info, code = match.group(1), match.group(2).split(), match.group(3)
        if lang not in {"python", "bash", "sh"}:
            continue
        block = Block(lang, "slow" in info, code, text.count("\n", 0, match.start()) + 1)
        (runnable if "runnable" in info else other).append(block)
    return runnable, other


RUNNABLE, SHOWN = blocks(README.read_text())


def test_the_convention_finds_blocks_and_every_other_block_is_accounted_for() -> None:
    assert len(RUNNABLE) >= 4, "the README's three paths each show a runnable block"
    firsts = [b.code.splitlines()[0] for b in SHOWN]
    unlisted = [line for line in firsts if not line.startswith(tuple(NOT_RUN))]
    assert not unlisted, f"README blocks neither marked runnable nor in NOT_RUN: {unlisted}"


def fresh_venv(where: Path) -> Path:
    """A new venv seeing only the checkout and the shared site-packages; returns its bin/."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shared = sysconfig.get_paths()["purelib"]
    Path(purelib, "readme_test.pth").write_text(
        f"{ROOT}\nimport site; site.addsitedir({shared!r})\n"
    )
    command = where / "bin" / "localsession"
    command.write_text(
        f"#!{python}\nimport sys\nfrom localsession.cli import main\nsys.exit(main())\n"
    )
    command.chmod(0o755)
    return where / "bin"


def _param(block: Block) -> object:
    marks = [pytest.mark.integration] + ([pytest.mark.slow] if block.slow else [])
    return pytest.param(block, marks=marks, id=f"{block.lang}-line{block.line}")


def _run_block(
    argv: list[str], work: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run a block as the leader of its own process group, its output in files, and stop the
    group when it ends: a server the block started and did not stop (its client failed
    before the block's ``kill``) is stopped too, and cannot hold an output pipe open, which
    kept ``subprocess.run`` waiting past its timeout."""
    out, err = work.parent / "block.out", work.parent / "block.err"
    with out.open("w") as o, err.open("w") as e:
        with procio.spawn(argv, cwd=work, env=env, stdout=o, stderr=e) as proc:
            code = proc.wait(timeout=TIMEOUT_S)
    return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_a_runnable_readme_block_runs_in_a_fresh_venv(block: Block, tmp_path: Path) -> None:
    bindir = fresh_venv(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path / "user"),
        "LOCALSESSION_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    argv = (
        [str(bindir / "python"), "-c", block.code]
        if block.lang == "python"
        else ["bash", "-euo", "pipefail", "-c", block.code]
    )
    done = _run_block(argv, work, env)
    assert done.returncode == 0, f"README line {block.line}:\n{done.stdout}\n{done.stderr}"
    warned = WARNING_RE.findall(done.stderr)
    assert not warned, f"README line {block.line} warns on stderr: {warned}\n{done.stderr}"
    for marker, printed in PRINTS.items():
        if marker in block.code:
            assert printed in done.stdout, f"README line {block.line}: {done.stdout}"
    if "import tinker" in block.code:  # the SDK's own deprecation warnings: show current calls
        warned = re.findall(r".*(?:DeprecationWarning|FutureWarning).*", done.stderr)
        assert not warned, f"README line {block.line} uses deprecated SDK calls: {warned}"


@pytest.mark.slow
@pytest.mark.integration
def test_make_demo_runs_its_loop_in_the_set_up_venv(tmp_path: Path) -> None:
    """The README's ``make demo``, one GRPO step long, in the venv ``make test`` set up (its
    install stamps present, so make installs nothing): both accuracy lines, the summary and
    the plot."""
    venv = Path(sys.prefix)
    stamps = [
        venv / name
        for name in (".localsession-installed", ".smollm2-installed", ".sagemaker-sdk-installed")
    ]
    if not all(stamp.exists() for stamp in stamps):
        pytest.skip(f"{venv} is not a venv that `make` set up (no {stamps[0].name})")
    run_dir = tmp_path / "demo"
    argv = ["make", "-C", str(ROOT), "demo", f"VENV={venv}", "DEMO_STEPS=1", f"DEMO_RUN={run_dir}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    before = re.search(
        r"held-out accuracy before training: ([\d.]+) greedy \((\d+)/50\)", done.stdout
    )
    after = re.search(
        r"held-out accuracy after training: ([\d.]+) greedy \((\d+)/50\)", done.stdout
    )
    assert before and after, done.stdout
    for found in (before, after):
        assert float(found.group(1)) == pytest.approx(int(found.group(2)) / 50)
    assert (run_dir / "summary.json").exists() and (run_dir / "metrics.png").exists()
