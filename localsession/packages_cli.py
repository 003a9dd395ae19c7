"""``localsession packages list|show|delete|prune``, through the service's registry.

``list`` and ``show`` only read: on a home with no ``packages/`` directory they create
nothing. ``prune`` lists what it would delete (runtime/packages/prune.py decides) and deletes it,
files included, only with ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys

from localsession import wiring
from localsession.runtime.errors import ServiceError
from localsession.runtime.home import ConfigError
from localsession.runtime.packages.registry import PackageInfo
from localsession.runtime.service import Service


def run_packages(args: argparse.Namespace) -> int:
    service = wiring.build_service()
    home = service.config.home
    try:
        if args.verb in ("list", "prune") and not (home / "packages").is_dir():
            print(f"no model packages under {home}", file=sys.stderr)
            return 0
        if args.verb == "list":
            return _list(service, args.group, args.kind)
        if args.verb == "prune":
            return _prune(service, args)
        if args.verb == "show":
            body = service.describe_model_package({"ModelPackageName": args.arn})
            print(json.dumps(body, indent=2, default=str))
            return 0
        result = service.delete_model_package(
            {"ModelPackageName": args.arn}, delete_artifacts=args.delete_artifacts
        )
        kept = result["RetainedAt"]
        done = f"files kept at {kept}" if kept else f"{result['ObjectsDeleted']} files deleted"
        print(f"deleted {args.arn}; {done}")
        return 0
    except ServiceError as exc:
        print(f"localsession packages: error: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = exc.filename or home
        raise ConfigError(
            f"cannot use {where} ({exc.strerror or exc}); check its permissions, or point "
            "LOCALSESSION_HOME at another directory"
        ) from None
    finally:
        service.close()


def _line(p: PackageInfo) -> str:
    return f"{p.arn}\t{p.kind}\t{p.base_model}\t{p.creation_time}\t{p.description}"


def _list(service: Service, group: str | None, kind: str | None) -> int:
    registry = service.registry
    groups = [group] if group else registry.groups()
    shown = 0
    for name in groups:
        for package in registry.list(name):
            if kind is None or package.kind == kind:
                print(_line(package))
                shown += 1
    if not shown:
        what = " and ".join(
            f for f in (f"group {group!r}" if group else "", f"kind {kind!r}" if kind else "") if f
        )
        known = ", ".join(registry.groups()) or "none"
        print(
            f"no model package matched {what or 'in this home'} (groups: {known})",
            file=sys.stderr,
        )
    return 0


def _prune(service: Service, args: argparse.Namespace) -> int:
    from localsession.runtime.packages.prune import parse_age, plan, size_of

    older = parse_age(args.older_than) if args.older_than is not None else None
    registry = service.registry
    groups = args.group or registry.groups()
    packages = [p for g in groups for p in registry.list(g)]
    decided = plan(packages, keep_latest=args.keep_latest, older_than=older, kind=args.kind)
    sizes = {p.arn: size_of(registry.path(p.arn)) for p in decided.delete}
    mb = sum(sizes.values()) / 1e6
    for package in decided.delete:
        if args.yes:
            service.delete_model_package({"ModelPackageName": package.arn}, delete_artifacts=True)
        verb = "deleted" if args.yes else "would delete"
        print(f"{verb}\t{package.arn}\t{package.kind}\t{package.creation_time}")
    selected = len(decided.delete) + len(decided.keep)
    summary = f"{len(decided.delete)} of {selected} selected packages ({mb:.1f} MB)"
    if args.yes:
        print(f"pruned {summary}; kept {len(decided.keep)}", file=sys.stderr)
    else:
        print(
            f"dry run: would prune {summary}, keep {len(decided.keep)}; add --yes to delete",
            file=sys.stderr,
        )
    return 0
