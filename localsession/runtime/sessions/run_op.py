"""What each training op does: the engine call, its result and how a failure reads.

An op holds the typed command it runs (``port_commands``, whichever dialect sent it), and
:func:`_run` matches on its type: one engine call per command, a typed result.
``execute`` runs one op that the session has marked running, on whichever thread runs it
(the session's worker, or a caller in ``Runner.run_here``), and always finishes it:
Completed with the engine's result, or Failed with details that name the problem. An
exception never escapes to the worker. Save ops write a model package through the registry.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from localsession import vocab
from localsession.port import Engine, EngineInputError
from localsession.port_commands import ForwardCommand, LoadCommand, OptimCommand, SaveCommand
from localsession.port_results import LoadResult, SaveResult
from localsession.runtime import errors
from localsession.runtime.faults import Faults
from localsession.runtime.packages.registry import CHECKPOINT, MODEL
from localsession.runtime.sessions.operations import Operation, TokenUsage
from localsession.runtime.sessions.package_fit import Fits, PackageMismatch, compatible_package

_log = logging.getLogger(__name__)


class Session(Fits, Protocol):
    """What running an op reads and updates of its session (``lifecycle.Session``)."""

    name: str
    arn: str
    details: dict[str, Any]
    faults: Faults | None
    lock: threading.RLock
    usage: TokenUsage


def execute(session: Session, engine: Engine, op: Operation) -> None:
    """Run ``op`` on ``engine`` (or fail it with an armed injected fault) and finish it."""
    if session.faults is not None and session.faults.armed:
        delay = session.faults.on_start(op.kind)
        if delay:  # an injected slow-down (runtime/faults.py): the op runs that much later
            time.sleep(delay)
        failure = session.faults.on_execute(op.kind)
        if failure is not None:  # an injected fault (runtime/faults.py): nothing changes
            op.finish(vocab.OpStatus.FAILED, error=failure)
            return
    try:
        _run(session, engine, op)
    except Exception as exc:  # noqa: BLE001 - an op failure must not kill the worker
        if isinstance(exc, OSError) and op.kind in (
            vocab.OpKind.SAVE_STATE,
            vocab.OpKind.SAVE_WEIGHTS,
        ):
            # A package the registry could not write: name the file and the fix.
            where = f"{exc.filename}: " if exc.filename else ""
            _log.error("session %s: %s op %s failed: %s", session.name, op.kind, op.id, exc)
            op.finish(
                vocab.OpStatus.FAILED,
                error=f"{op.kind} failed: {where}{exc.strerror or exc}. The model package "
                "registry lives under LOCALSESSION_HOME (default ~/.localsession); make it "
                "writable or point LOCALSESSION_HOME at a writable directory.",
            )
            return
        expected = (EngineInputError, PackageMismatch)
        if not isinstance(exc, (errors.ServiceError, *expected)):
            _log.exception("session %s: %s op %s crashed", session.name, op.kind, op.id)
        details = errors.op_error_details(exc, f"running {op.kind}", expected)
        op.finish(vocab.OpStatus.FAILED, error=details)


def _run(session: Session, engine: Engine, op: Operation) -> None:
    """The engine call of ``op``'s typed command; finish ``op`` Completed with its result."""
    match op.command:
        case ForwardCommand() as command:
            result = engine.forward_backward(
                command.datums, command.loss_fn, command.loss_config, backward=command.backward
            )
            with session.lock:
                session.usage.training += result.token_count
            op.finish(vocab.OpStatus.COMPLETED, result=result)
        case OptimCommand() as command:
            op.finish(vocab.OpStatus.COMPLETED, result=engine.optim_step(command.adam))
        case SaveCommand() as command:
            op.finish(vocab.OpStatus.COMPLETED, result=SaveResult(_save(session, engine, command)))
        case LoadCommand() as command:
            path = compatible_package(session, command.package_arn, training=True)
            engine.load_package(str(path), load_optimizer=command.load_optimizer)
            op.finish(vocab.OpStatus.COMPLETED, result=LoadResult())
        case _:  # pragma: no cover - only training commands are queued
            op.finish(vocab.OpStatus.FAILED, error=f"Unsupported operation {op.kind}")


def _save(session: Session, engine: Engine, command: SaveCommand) -> str:
    """Write a CHECKPOINT (saveState) or MODEL (saveWeights) package; return its ARN."""
    checkpoint, merged = command.checkpoint, command.merge_weights
    info = session.registry().create(
        session.details.get("ModelPackageGroupArn") or vocab.DEFAULT_GROUP,
        kind=CHECKPOINT if checkpoint else MODEL,
        base_model=session.spec.base_model,
        lora_rank=session.spec.rank,
        lora_alpha=session.spec.alpha,
        description=command.description or f"{command.kind} of training session {session.name}",
        session=session.name,
        merged=merged,
        write=lambda tmp: engine.save_package(
            str(tmp), include_optimizer=checkpoint, merge_weights=merged
        ),
        region=session.arn.split(":")[3],  # the session's region: its packages name it too
        s3_output_path=_s3_output_path(session.details),
        key=command.key or "",
    )
    return info.arn


def _s3_output_path(details: dict[str, Any]) -> str | None:
    """``OutputConfig.S3Location.Path`` as the session was created with."""
    location = (details.get("OutputConfig") or {}).get("S3Location") or {}
    path = location.get("Path") if isinstance(location, dict) else None
    return path if isinstance(path, str) else None
