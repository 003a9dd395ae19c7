"""The conformance suite's documentation agrees with its code: the limit options' defaults
(limits.py's help, docs/parity.md, docs/peers.md against ``Limits`` and run_peers.py), the
test counts the docs state against what pytest collects, and the known divergences
docs/tinker.md names against the dialect's xfail file."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from _runs import ROOT, env

from conformance.adapter import Limits
from conformance.limits import OPTIONS

DOCS = ROOT / "docs"
README = ROOT / "conformance" / "README.md"


def _collected(folder: str) -> int:
    """Tests pytest collects in ``conformance/<folder>`` (slow ones included)."""
    args = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "--backend=fakes",
            "-p", "no:cacheprovider", "--collect-only", "-q",
            str(ROOT / "conformance" / folder)]  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    found = re.search(r"(\d+)(?:/(\d+))? tests? collected", done.stdout)  # selected/all
    assert found, done.stdout[-2000:]
    return int(found.group(2) or found.group(1))


def _help(option: str) -> str:
    return OPTIONS[option][2]


def test_limit_defaults_in_help_and_docs_are_the_code_s() -> None:
    limits = Limits()
    assert f"default {limits.op_timeout_s:g}" in _help("--op-timeout")
    assert f"default {limits.gap_timeout_s:g}" in _help("--gap-timeout")
    parity = (DOCS / "parity.md").read_text()
    row = next(line for line in parity.splitlines() if line.startswith("| `--op-timeout"))
    assert f"default {limits.op_timeout_s:g}" in row, row
    gap = next(line for line in parity.splitlines() if line.startswith("| `--gap-timeout"))
    assert f"default {limits.gap_timeout_s:g}" in gap, gap
    assert f"({limits.op_timeout_s:g} s by default)" in " ".join(parity.split())


def test_peers_md_states_run_peers_op_timeout_and_the_suite_default() -> None:
    sys.path.insert(0, str(ROOT / "conformance" / "peers"))
    try:
        import run_peers
    finally:
        sys.path.pop(0)
    text = " ".join((DOCS / "peers.md").read_text().split())
    assert f"at most {run_peers.OP_TIMEOUT_S} s" in text
    assert f"passes `--op-timeout {run_peers.OP_TIMEOUT_S}`" in text
    assert f"the suite's own default is {Limits().op_timeout_s:g} s" in text


@pytest.mark.integration
def test_stated_test_counts_are_the_collected_counts() -> None:
    tinker, sagemaker = _collected("suite_tinker"), _collected("suite")
    readme = " ".join(README.read_text().split())
    stated = re.findall(r"its (\d+) tests|the (\d+) tests of `suite_tinker/`", readme)
    assert stated, "conformance/README.md states no Tinker test count"
    for groups in stated:
        assert int(next(g for g in groups if g)) == tinker, (stated, tinker)
    tinker_md = " ".join((DOCS / "tinker.md").read_text().split())
    assert f"`conformance/suite_tinker/` ({tinker} tests)" in tinker_md
    testing = " ".join((DOCS / "testing.md").read_text().split())
    assert f"runs {sagemaker} tests of the public API" in testing


def test_known_divergences_in_tinker_md_are_the_xfail_file_s() -> None:
    xfail = ROOT / "conformance" / "backends" / "tinker-localsession.xfail"
    entries = [
        line.split("#")[0].strip().split("::")[-1]
        for line in xfail.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    text = " ".join((DOCS / "tinker.md").read_text().split())
    assert "every test passes but the known divergences listed in" in text
    assert "`conformance/backends/tinker-localsession.xfail`" in text
    if not entries:
        assert "(none at present" in text
    for name in entries:
        assert f"`{name}`" in text, f"docs/tinker.md does not name the known divergence {name}"
    # a test the docs call failing must be a known divergence
    for name in re.findall(r"every test passes but `(test_\w+)`", text):
        assert name in entries, name


def test_stated_planted_defect_counts_are_the_selfchecks() -> None:
    """docs/development.md's ``make selfcheck`` line and conformance/README.md's integration
    tier state how many defects the mutation run plants: both selfcheck catalogues together."""
    from conformance.selfcheck import EXPECTED as SAGEMAKER

    pytest.importorskip("tinker")
    from conformance.selfcheck_tinker import EXPECTED as TINKER

    planted = len(SAGEMAKER) + len(TINKER)
    development = " ".join((DOCS / "development.md").read_text().split())
    assert f"mutation score: {planted} planted defects" in development
    readme = " ".join(README.read_text().split())
    assert f"integration tier ({planted} defects;" in readme
