"""Every ``LOCALSESSION_*`` variable, declared once, and the docs table generated from them.

:data:`VARIABLES` lists the engine's variables (:mod:`localsession.engine_options`), the
service's (runtime/config.py, the model catalog) and the tooling's (tests, benches,
conformance). docs/configuration.md holds the table :func:`table` renders between two marker
lines; ``python -m localsession.settings --check`` exits 1 when the file's table differs from
the generated one, and ``--write`` rewrites it (tests/test_settings_table.py runs the check and
also greps the repository for a ``LOCALSESSION_*`` name the list lacks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localsession import vocab
from localsession.engine_options import ENGINE_VARIABLES, Variable

_SERVICE = (
    Variable(
        "LOCALSESSION_HOME",
        "~/.localsession",
        "a writable directory",
        "State directory: model packages, session records, models.json (`--home`).",
        "service",
    ),
    Variable(
        "LOCALSESSION_CACHE",
        "$XDG_CACHE_HOME/localsession, else ~/.cache/localsession",
        "a writable directory",
        "Machine-wide cache of files derived from models (GGUF conversions, tokenizer exports).",
        "service",
    ),
    Variable(
        "LOCALSESSION_MODEL_MAP",
        "unset",
        "NAME=TARGET entries separated by commas",
        "Serve base model NAME with TARGET, a built-in, directory, .gguf or cached Hub model "
        "(docs/models.md).",
        "service",
    ),
    Variable(
        "LOCALSESSION_MAX_SESSIONS",
        "4",
        "a whole number >= 1",
        "Sessions live at once (`--max-sessions`).",
        "service",
    ),
    Variable(
        "LOCALSESSION_GAP_TIMEOUT",
        "60",
        "seconds >= 0",
        "Seconds a missing sequence number blocks later ops before it is recorded lost "
        "(`--gap-timeout`; in-process clients use 0).",
        "service",
    ),
    Variable(
        "LOCALSESSION_IDLE_TIMEOUT",
        "unset (never)",
        "seconds >= 0",
        "Seconds of inactivity before a session becomes Expired (`--idle-timeout`).",
        "service",
    ),
    Variable(
        "LOCALSESSION_HEARTBEAT_TIMEOUT",
        f"{vocab.TINKER_HEARTBEAT_TIMEOUT_S:g}",
        "seconds >= 0 (0: never)",
        "Seconds without a heartbeat before a Tinker session expires (`--heartbeat-timeout`).",
        "service",
    ),
)

_TOOLING = (
    Variable(
        "LOCALSESSION_TEST_THREADS",
        "1",
        "a whole number >= 1",
        "Torch threads of the engine tests (tests/engine/conftest.py).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_TEST_PROCESS_TAG",
        "set by the tests",
        "any text",
        "Marks the servers a test started, so the suite can find leftovers (tests/procio.py).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_STALL",
        "unset",
        "KIND:N",
        "Crash harness: stall the N-th save of KIND (tests/reliability/crash_harness.py).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_STALL_MARK",
        "unset",
        "a file path",
        "Crash harness: the file written when the stall begins.",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_SOAK_SECONDS",
        "180",
        "seconds",
        "Length of the soak test (tests/reliability/test_soak.py).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_COOKBOOK_PYTHON",
        "the running python",
        "a python executable",
        "Python with tinker-cookbook's dependencies, for the cookbook test.",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_OLD_TINKER_PYTHON",
        "unset (test skipped)",
        "a python executable",
        "Python with an older tinker SDK, for the old-SDK conformance test.",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_PEERS",
        "~/.cache/localsession-peers",
        "a directory",
        "Where conformance/peers installs and runs third-party servers.",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_RECORD_PINNED",
        "unset (compare)",
        "1",
        "Re-record the pinned numerics instead of comparing (tests/test_pinned_numerics.py).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_CHROMIUM",
        "/usr/bin/chromium",
        "a Chromium executable",
        "The browser the console tests drive (tests/browser, `make test-browser`).",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_ARTIFACTS",
        "runs/browser",
        "a directory",
        "Where the browser tests save their screenshots.",
        "tooling",
    ),
    Variable(
        "LOCALSESSION_REAL_MODEL_CACHE",
        "~/.cache/localsession/smollm2-135m-instruct",
        "a directory",
        "Where the benches keep the real SmolLM2 model (bench/real_model.py).",
        "tooling",
    ),
)

#: Every ``LOCALSESSION_*`` variable: engine, service, tooling.
VARIABLES: tuple[Variable, ...] = ENGINE_VARIABLES + _SERVICE + _TOOLING

DOC = Path("docs") / "configuration.md"
BEGIN = "<!-- generated by python -m localsession.settings --write: do not edit -->"
END = "<!-- end of generated table -->"
_HEADINGS = {
    "engine": "Engine (one `EngineOptions`, printed in `serve`'s banner)",
    "service": "Service",
    "tooling": "Tests, benches and conformance",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """The markdown the docs hold between :data:`BEGIN` and :data:`END`."""
    lines: list[str] = []
    for scope, heading in _HEADINGS.items():
        lines += [f"### {heading}", "", "| Variable | Default | Accepted | What it does |"]
        lines.append("| --- | --- | --- | --- |")
        for v in VARIABLES:
            if v.scope == scope:
                cells = (f"`{v.name}`", v.default, v.accepted, v.purpose)
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def render(text: str) -> str:
    """``text`` (the doc) with its table replaced by the generated one; raises
    ``ValueError`` when the markers are missing."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC}: the lines {BEGIN!r} and {END!r} are missing")
    return text[: start + len(BEGIN)] + "\n" + table() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localsession.settings",
        description=f"Check or rewrite the LOCALSESSION_* table in {DOC}.",
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root")
    parser.add_argument("--write", action="store_true", help="rewrite the table in place")
    args = parser.parse_args(argv)
    path = args.root / DOC
    text = path.read_text(encoding="utf-8")
    wanted = render(text)
    if args.write:
        path.write_text(wanted, encoding="utf-8")
        return 0
    if wanted != text:
        print(
            f"{path}: the variable table is out of date; "
            "run python -m localsession.settings --write"
        )
        return 1
    print(f"{path}: the variable table matches the code ({len(VARIABLES)} variables)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
