"""docs/peers.md's generated parts, from the JSON reports of ``make conformance-peers``.

The reports of the last peer runs are kept in ``conformance/peers/reports/`` (one
conformance report per peer and SDK, ``run_peers.py`` adds a ``"run"`` entry: the peer, its
version, the SDK, the time taken and the box's load). This script renders them into the
blocks of docs/peers.md between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME
-->`` (``results``: one row per run; ``verdicts``: every test that did not pass, per run,
with the reason the run recorded); the prose around the blocks is written by hand.

    python conformance/peers/report_peers.py --write            # docs/peers.md from reports/
    python conformance/peers/report_peers.py --from X.json --write  # keep X.json, then write
    python conformance/peers/report_peers.py --check            # exit 1 if docs/peers.md is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "conformance" / "peers" / "reports"
DOC = ROOT / "docs" / "peers.md"
#: The longest reason a verdict line quotes (reports keep 500 characters).
REASON_CHARS = 300
NOT_PASSED = ("failed", "error", "xpassed", "skipped", "xfailed")


def scrub(text: str) -> str:
    """``text`` with this checkout's path as ``<repo>`` and the home directory as ``~``."""
    return text.replace(str(ROOT), "<repo>").replace(str(Path.home()), "~")


def load_reports(folder: Path) -> list[dict[str, Any]]:
    """The conformance reports in ``folder`` (``*.json``), by file name; each gets its file's
    stem as ``"name"``."""
    reports = []
    for path in sorted(folder.glob("*.json")):
        body = json.loads(path.read_text())
        if body.get("format") != "conformance-report/1":
            raise ValueError(f"{path}: not a conformance report (format {body.get('format')!r})")
        reports.append({**body, "name": path.stem})
    return reports


#: Colour codes, raw or as a repr writes them (a reason may quote a server's dict).
ANSI = re.compile(r"(?:\x1b|\\x1b)\[[0-9;]*m")


def _cell(text: object) -> str:
    return ANSI.sub("", str(text)).replace("|", "\\|").replace("\n", " ")


def _short(text: object, chars: int = REASON_CHARS) -> str:
    """``text`` on one line, colour codes dropped, cut at ``chars``."""
    said = " ".join(ANSI.sub("", str(text)).replace("\\n", " ").split())
    return said if len(said) <= chars else said[: chars - 3] + "..."


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def render_results(reports: Sequence[dict[str, Any]]) -> str:
    """The results table: one row per report."""
    lines = [
        "| run | server | SDK | model | tests | passed | failed | errors | skipped | time "
        "| load (1 min: min / mean / max) | date | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        run = report.get("run", {})
        summary = report["summary"]
        load = run.get("load_1min")
        load_text = f"{load['min']:g} / {load['mean']:g} / {load['max']:g}" if load else "?"
        unavailable = report["backend"].get("unavailable")
        notes = []
        if unavailable:
            notes.append(f"backend unavailable: {_short(unavailable, 120)}")
        if run.get("server_exit"):
            notes.append(run["server_exit"])
        hangs = run.get("attempts", 1) - 1 - run.get("server_exits", 0)  # the other resumes
        if hangs > 0:
            notes.append(f"{hangs} hang(s) ended the process; resumed")
        timeouts = sum(1 for t in report["tests"] if "test timeout" in str(t.get("reason", "")))
        if timeouts:
            notes.append(
                f"{timeouts} stopped at the {run.get('test_timeout_s', '?')} s test timeout"
            )
        cells = [
            f"`{report['name']}`",
            f"{run.get('peer', report['backend']['name'])} {run.get('peer_version', '')}".strip(),
            run.get("sdk", "?"),
            run.get("model", "?"),
            len(report["tests"]),
            summary.get("passed", 0),
            summary.get("failed", 0) + summary.get("xpassed", 0),
            summary.get("error", 0),
            summary.get("skipped", 0) + summary.get("xfailed", 0),
            _minutes(report.get("duration_s", 0.0)),
            f"{load_text} ({run.get('cpus', '?')} CPUs)",
            str(report.get("created", "?"))[:10],
            "; ".join(notes),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_verdicts(reports: Sequence[dict[str, Any]]) -> str:
    """Every test of each report that did not pass, with the reason recorded for it."""
    out: list[str] = []
    for report in reports:
        run = report.get("run", {})
        title = f"{run.get('peer', report['backend']['name'])} with {run.get('sdk', '?')}"
        unavailable = report["backend"].get("unavailable")
        if unavailable:  # one reason for every test: said once
            out += ["", f"**{title}** (`{report['name']}`): none of {len(report['tests'])} tests "
                    f"ran: backend unavailable: {_short(unavailable, 1000)}"]  # fmt: skip
            continue
        bad = [t for t in report["tests"] if t["outcome"] in NOT_PASSED]
        out += ["", f"**{title}** (`{report['name']}`): {len(bad)} of {len(report['tests'])} "
                "tests did not pass"]  # fmt: skip
        for outcome in NOT_PASSED:
            for test in (t for t in bad if t["outcome"] == outcome):
                reason = _short(test.get("reason") or "no reason recorded")
                short = test["id"].rsplit("/", 1)[-1]
                out.append(f"- `{short}` {outcome} ({test['duration_s']:g} s): {reason}")
    return "\n".join(out).lstrip("\n") + "\n"


BLOCKS = {"results": render_results, "verdicts": render_verdicts}


def fill(text: str, reports: Sequence[dict[str, Any]]) -> str:
    """``text`` with each generated block rendered anew from ``reports``."""
    for name, render in BLOCKS.items():
        begin = f"<!-- generated: {name} (conformance/peers/report_peers.py; do not edit) -->"
        end = f"<!-- end generated: {name} -->"
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        found = pattern.search(text)
        if found is None:
            raise ValueError(f"docs/peers.md has no block {begin!r} ... {end!r}")
        text = text[: found.start()] + f"{begin}\n{render(reports)}{end}" + text[found.end() :]
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="sources", type=Path, action="append", default=[],
                        metavar="REPORT.json",
                        help="copy this report into --reports first")  # fmt: skip
    parser.add_argument("--reports", type=Path, default=REPORTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the doc's generated blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if they are not current")
    args = parser.parse_args(argv)
    args.reports.mkdir(parents=True, exist_ok=True)
    for source in args.sources:  # kept in the repo: no path of this machine in them
        (args.reports / source.name).write_text(scrub(source.read_text()))
    reports = load_reports(args.reports)
    text = args.doc.read_text()
    filled = fill(text, reports)
    if args.check:
        if filled != text:
            print(f"{args.doc} is not what {args.reports} renders: run {Path(__file__).name} "
                  "--write", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    args.doc.write_text(filled)
    print(f"{args.doc}: {len(reports)} reports rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
