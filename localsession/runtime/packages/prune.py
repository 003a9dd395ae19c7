"""Which model packages ``localsession packages prune`` deletes, decided before anything is.

A package is *pruned* when it is in the selected groups (all by default) and of the selected
kind (both by default), and it is neither

- among the newest ``keep_latest`` packages of its group (counted among the selected kind,
  newest by version, which counts up per group), nor
- younger than ``older_than`` (when given, only packages created before ``now - older_than``
  may go).

At least one of ``keep_latest`` and ``older_than`` must be given, so no spelling of the
command deletes everything by accident (``--keep-latest 0`` empties the selection on purpose).
Pure Python, no torch; the CLI (localsession/packages_cli.py) lists or deletes the plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from localsession.runtime.home import ConfigError
from localsession.runtime.packages.registry import PackageInfo

_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``7d`` or ``2w`` as a timedelta."""
    match = _AGE_RE.match(text)
    if match is None:
        raise ConfigError(
            f"--older-than {text!r}: expected a number and a unit, e.g. 90s, 30m, 12h, 7d, 2w"
        )
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


@dataclass
class PrunePlan:
    """The packages to delete and those kept, both newest first within each group."""

    delete: list[PackageInfo] = field(default_factory=list)
    keep: list[PackageInfo] = field(default_factory=list)


def plan(
    packages: Iterable[PackageInfo],
    *,
    keep_latest: int | None = None,
    older_than: timedelta | None = None,
    kind: str | None = None,
    now: datetime | None = None,
) -> PrunePlan:
    """Split ``packages`` (already restricted to the selected groups) into delete and keep."""
    if keep_latest is None and older_than is None:
        raise ConfigError(
            "say what to keep: --keep-latest N (the newest N of each group) and/or "
            "--older-than AGE (only older packages go)"
        )
    if keep_latest is not None and keep_latest < 0:
        raise ConfigError(f"--keep-latest {keep_latest}: must be 0 or more")
    cutoff = (now or datetime.now(timezone.utc)) - older_than if older_than is not None else None
    result = PrunePlan()
    by_group: dict[str, list[PackageInfo]] = {}
    for package in packages:
        if kind is None or package.kind == kind:
            by_group.setdefault(package.group, []).append(package)
    for group in sorted(by_group):
        newest_first = sorted(by_group[group], key=lambda p: p.version, reverse=True)
        for rank, package in enumerate(newest_first):
            protected = keep_latest is not None and rank < keep_latest
            young = cutoff is not None and package.created() >= cutoff
            (result.keep if protected or young else result.delete).append(package)
    return result


def size_of(path: Path) -> int:
    """Bytes in the files under ``path`` (0 if it is gone)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
