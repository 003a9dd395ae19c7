"""The typed control plane: sessions and model packages as a dialect with its own wire sees them.

The SageMaker operations (``stop_training_session``, ``list_model_packages``, ...) take and
return wire-shaped dicts; a dialect that speaks another wire (server/tinker) calls these
instead and gets typed values back, so it never builds a SageMaker request, reads a SageMaker
response, or reaches into the session table or the registry:

- :meth:`ControlPlane.stop` and :meth:`ControlPlane.state` (status and its error);
- :meth:`ControlPlane.when_done`: the dialect's own bookkeeping when an op ends (no fault
  injection, no worker wake-up: it is not a client's request or wait);
- :meth:`ControlPlane.package`, :meth:`ControlPlane.find_package` (by the dialect's own key,
  stored as ``key`` in the package's record), :meth:`ControlPlane.keyed_packages`,
  :meth:`ControlPlane.packages_of` (a session's), :meth:`ControlPlane.delete_package` and
  :meth:`ControlPlane.package_dir` / :meth:`ControlPlane.package_dir_at` (its files).

A package's key is the name its dialect gave it (Tinker: its ``tinker://`` path), written by
the save (``SaveCommand.key``). Homes written before packages had keys held that name in the
package's description; a package with no key whose description starts with the prefix asked
for is read as keyed by its description, so those checkpoints are still found.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from localsession import vocab
from localsession.port_commands import SessionCommand
from localsession.port_results import OpOutcome
from localsession.runtime import errors
from localsession.runtime.packages.registry import INDEX_FILE, PackageInfo, Registry
from localsession.runtime.sessions.table import SessionTable

#: The role a session made from a typed command names (its dialect has no roles).
ROLE = "localsession"
#: The output head's module name in the catalog's (Llama-family) models.
HEAD = "lm_head"
#: PEFT's adapter description in an engine's package (``target_modules`` lists what it adapts).
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class SessionState:
    """A session's status and, when it failed, why."""

    name: str
    status: str
    error: str | None = None


@dataclass(frozen=True)
class PackageRecord:
    """One model package as a dialect reads it."""

    arn: str
    group: str
    version: int
    #: the dialect's own name for it ("" when it was given none)
    key: str
    kind: str  # registry.CHECKPOINT (with optimizer state) or registry.MODEL
    base_model: str
    rank: int
    #: its adapter covers the output head (Tinker's ``train_unembed``)
    adapts_head: bool
    session: str
    created: datetime
    description: str
    #: its files in S3 terms (an ``s3://`` prefix ending in ``/``)
    location: str


def described(command: SessionCommand, account: str) -> dict[str, Any]:
    """The ``DescribeTrainingSession`` members of a session made from a typed command that
    brought none of its own (a dialect with its own wire): its role, LoRA and base model."""
    return {
        "RoleArn": f"arn:aws:iam::{account}:role/{ROLE}",
        "LoraConfig": {"Rank": command.rank, "Alpha": command.alpha},
        "ModelConfig": {"BaseModelArn": command.base_model},
    }


def adapts_head(folder: Path) -> bool:
    """Whether the adapter in a package folder covers the output head: its
    ``adapter_config.json`` lists ``lm_head`` among ``target_modules`` (a package without
    one, such as the fakes', adapts nothing there)."""
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    targets = config.get("target_modules") if isinstance(config, dict) else None
    return isinstance(targets, list) and HEAD in targets


def key_of(info: PackageInfo, prefix: str) -> str:
    """A package's key; for one saved before keys (none recorded), its description when
    that starts with ``prefix`` (where such a dialect kept it), else ""."""
    if info.key:
        return info.key
    return info.description if prefix and info.description.startswith(prefix) else ""


class ControlPlane:
    """Typed stop/state over the session table and package reads over the registry."""

    def __init__(self, table: SessionTable, registry: Callable[[], Registry]) -> None:
        self._table = table
        self._registry = registry

    # -- sessions ------------------------------------------------------------------------

    def stop(self, name: str) -> None:
        """Stop a session (its queued training ops are Skipped); a session already stopping
        or ended is left as it is. ``ResourceNotFound`` if there is none."""
        session = self._table.get(name, runtime=False)
        if session.status not in vocab.SESSION_NOT_STOPPABLE:
            session.stop()

    def state(self, name: str) -> SessionState:
        """A session's status and error; ``ResourceNotFound`` if there is none."""
        session = self._table.get(name, runtime=True)
        with session.lock:
            return SessionState(name, str(session.status), session.error_details)

    def when_done(self, name: str, op_id: str, callback: Callable[[OpOutcome], None]) -> None:
        """Call ``callback(outcome)`` once op ``op_id`` of session ``name`` is terminal (at
        once if it is, else from the finishing thread: it must be quick and thread-safe)."""
        op = self._table.get(name, runtime=True).ops.get(op_id)
        if op is None:
            raise errors.not_found(
                f"Operation {op_id} does not exist in training session {name}.", runtime=True
            )

        def done() -> None:
            status = op.status
            result = op.result if status == vocab.OpStatus.COMPLETED else None
            callback(OpOutcome(status, result, op.error if result is None else None))

        op.add_done_callback(done)

    # -- packages ------------------------------------------------------------------------

    def _record(self, info: PackageInfo, prefix: str = "") -> PackageRecord:
        return PackageRecord(
            arn=info.arn,
            group=info.group,
            version=info.version,
            key=key_of(info, prefix),
            kind=info.kind,
            base_model=info.base_model,
            rank=info.lora_rank,
            adapts_head=adapts_head(self._registry().path(info.arn)),
            session=info.session,
            created=info.created(),
            description=info.description,
            location=info.location(),
        )

    def package(self, arn: str) -> PackageRecord:
        """The package an ARN names; ``ResourceNotFound`` (or a ``ValidationException``
        naming the ARN form) if there is none."""
        return self._record(self._registry().get(arn))

    def keyed_packages(self, prefix: str, group: str = vocab.DEFAULT_GROUP) -> list[PackageRecord]:
        """Every package of ``group`` whose key starts with ``prefix``, newest first."""
        return [
            self._record(info, prefix)
            for info in self._registry().list(group)
            if key_of(info, prefix).startswith(prefix)
        ]

    def find_package(
        self, key: str, prefix: str = "", group: str = vocab.DEFAULT_GROUP
    ) -> PackageRecord | None:
        """The newest package of ``group`` keyed ``key`` (``prefix``: the start every key of
        its dialect has, which also finds packages saved before keys); None if none is."""
        for info in self._registry().list(group):
            if key_of(info, prefix) == key:
                return self._record(info, prefix)
        return None

    def packages_of(self, session: str) -> list[PackageRecord]:
        """Every package a session saved, in any group, newest first."""
        registry = self._registry()
        found = [
            self._record(info)
            for group in registry.groups()
            for info in registry.list(group)
            if info.session == session
        ]
        return sorted(found, key=lambda p: p.created, reverse=True)

    def package_dir_at(self, group: str, version: int) -> Path | None:
        """The folder of version ``version`` of ``group`` (None if there is none)."""
        registry = self._registry()
        try:
            folder = registry.path(registry.arn(group, version))
        except errors.ServiceError:
            return None  # not a group name
        return folder if (folder / INDEX_FILE).is_file() else None

    def delete_package(self, arn: str) -> None:
        """Delete a package; its files move to the registry's ``retained/``."""
        self._registry().delete(arn, keep_artifacts=True)

    def package_dir(self, arn: str) -> Path:
        """The folder holding a package's files (read them; never write there)."""
        registry = self._registry()
        registry.get(arn)  # ResourceNotFound if it is gone
        return registry.path(arn)
