"""The size of each test tier, counted from one ``pytest --collect-only`` of the suite, and
docs/development.md's figures checked (or rewritten) against it.

``python tests/tier_sizes.py`` prints the counts and exits 1 when the doc's differ;
``--write`` rewrites them. The tiers are the Makefile's marker expressions: ``make test``
(not slow, not gpu, not browser: pyproject's addopts), ``make test-unit`` (also not
integration) and ``make test-slow`` (slow). Collecting the whole suite imports every test
module (a minute or more on 2 busy cores), so tests/test_docs_drift.py runs this check as
a ``slow`` test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "development.md"

#: tier -> (whether an item of these markers is in it, the doc's sentence around the count)
TIERS = {
    "default": (
        lambda m: not {"slow", "gpu", "browser"} & m,
        r"then the (\d[\d,]*) default tests",
    ),
    "unit": (
        lambda m: not {"slow", "gpu", "browser", "integration"} & m,
        r"the fast tier, (\d[\d,]*) tests",
    ),
    "slow": (lambda m: "slow" in m, r"the (\d[\d,]*) slower tests"),
}

#: A pytest plugin that writes each collected item's marker names once collection is done
#: (after tests/conftest.py marked its ``integration`` files; ``-m ""`` deselects nothing).
PLUGIN = """
import json, os


def pytest_collection_finish(session):
    with open(os.environ["TIER_SIZES_OUT"], "w") as out:
        json.dump([sorted({m.name for m in item.iter_markers()}) for item in session.items], out)
"""


def counts() -> dict[str, int]:
    """Each tier's number of tests, from one collection of ``tests/``."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "tier_sizes_plugin.py").write_text(PLUGIN)
        out = Path(scratch) / "markers.json"
        env = {**os.environ, "TIER_SIZES_OUT": str(out), "HF_HUB_OFFLINE": "1"}
        env["PYTHONPATH"] = os.pathsep.join([scratch, str(ROOT), env.get("PYTHONPATH", "")])
        command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", ""]
        command += ["-p", "tier_sizes_plugin", "-p", "no:cacheprovider", "tests"]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if not out.exists():
            raise RuntimeError(f"collection failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        items = [set(m) for m in json.loads(out.read_text())]
    return {tier: sum(1 for m in items if wanted(m)) for tier, (wanted, _) in TIERS.items()}


def rewrite(text: str, found: dict[str, int]) -> str:
    """``text`` with each tier's count replaced by ``found``'s; a missing sentence raises."""
    for tier, (_, pattern) in TIERS.items():
        match = re.search(pattern, text)
        if match is None:
            raise ValueError(f"{DOC.name}: no sentence matching {pattern!r} for the {tier} tier")
        text = text[: match.start(1)] + f"{found[tier]:,}" + text[match.end(1) :]
    return text


def main(argv: list[str]) -> int:
    found = counts()
    text = DOC.read_text(encoding="utf-8")
    wanted = rewrite(text, found)
    print(", ".join(f"{tier}: {n:,}" for tier, n in found.items()))
    if "--write" in argv:
        DOC.write_text(wanted, encoding="utf-8")
        return 0
    if wanted != text:
        print(f"{DOC}: the tier sizes are stale; run python tests/tier_sizes.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
