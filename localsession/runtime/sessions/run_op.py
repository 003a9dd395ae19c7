"""What each training op does: the engine call, its result and how a failure reads.

``execute`` runs one op that the session has marked running, on whichever thread runs it
(the session's worker, or a caller in ``Session.run_here``), and always finishes it:
Completed with the engine's result, or Failed with details that name the problem. An
exception never escapes to the worker. Save ops write a model package through the registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from localsession import vocab
from localsession.port import Engine, EngineInputError, EngineSpec
from localsession.port_results import LoadResult, SaveResult
from localsession.runtime import errors
from localsession.runtime.faults import Faults
from localsession.runtime.packages.registry import CHECKPOINT, MODEL, Registry
from localsession.runtime.sessions.operations import Operation

_log = logging.getLogger(__name__)


class Session(Protocol):
    """What running an op reads and updates of its session (``lifecycle.Session``)."""

    name: str
    spec: EngineSpec
    details: dict[str, Any]
    faults: Faults | None
    registry: Callable[[], Registry]
    lock: threading.RLock
    usage: dict[str, int]

    @property
    def region(self) -> str: ...
    def s3_output_path(self) -> str | None: ...
    def compatible_package(self, arn: str, *, training: bool = False) -> Path: ...


class PackageMismatch(Exception):
    """A package whose base model (or, for training, LoRA rank) does not fit the session."""


def execute(session: Session, engine: Engine, op: Operation) -> None:
    """Run ``op`` on ``engine`` (or fail it with an armed injected fault) and finish it."""
    if session.faults is not None and session.faults.armed:
        failure = session.faults.on_execute(op.kind)
        if failure is not None:  # an injected fault (runtime/faults.py): nothing changes
            op.finish(vocab.OpStatus.FAILED, error=failure)
            return
    try:
        if op.kind in (vocab.OpKind.FORWARD, vocab.OpKind.FORWARD_BACKWARD):
            result = engine.forward_backward(
                op.body["datumList"],
                op.body["lossFnName"],
                op.body.get("lossFnConfig"),
                backward=op.kind == vocab.OpKind.FORWARD_BACKWARD,
            )
            tokens = result.token_count
            with session.lock:
                session.usage["TrainingTokenCount"] += tokens
            op.finish(
                vocab.OpStatus.COMPLETED, result=result, token_usage={"trainingTokens": tokens}
            )
        elif op.kind == vocab.OpKind.OPTIMIZER_STEP:
            op.finish(
                vocab.OpStatus.COMPLETED, result=engine.optim_step(op.body["adamParamsConfig"])
            )
        elif op.kind in (vocab.OpKind.SAVE_STATE, vocab.OpKind.SAVE_WEIGHTS):
            arn = _save(session, engine, op.kind, op.body)
            op.finish(vocab.OpStatus.COMPLETED, result=SaveResult(arn))
        elif op.kind == vocab.OpKind.LOAD_STATE:
            path = session.compatible_package(op.body["modelPackageArn"], training=True)
            engine.load_package(str(path), load_optimizer=bool(op.body["loadOptimizer"]))
            op.finish(vocab.OpStatus.COMPLETED, result=LoadResult())
        else:  # pragma: no cover - validate.py admits only the kinds above
            op.finish(vocab.OpStatus.FAILED, error=f"Unsupported operation {op.kind}")
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


def _save(session: Session, engine: Engine, kind: str, body: dict[str, Any]) -> str:
    """Write a CHECKPOINT (saveState) or MODEL (saveWeights) package; return its ARN."""
    checkpoint = kind == vocab.OpKind.SAVE_STATE
    merged = bool(body.get("mergeWeights"))
    info = session.registry().create(
        session.details.get("ModelPackageGroupArn") or vocab.DEFAULT_GROUP,
        kind=CHECKPOINT if checkpoint else MODEL,
        base_model=session.spec.base_model,
        lora_rank=session.spec.rank,
        lora_alpha=session.spec.alpha,
        description=body.get("description") or f"{kind} of training session {session.name}",
        session=session.name,
        merged=merged,
        write=lambda tmp: engine.save_package(
            str(tmp), include_optimizer=checkpoint, merge_weights=merged
        ),
        region=session.region,
        s3_output_path=session.s3_output_path(),
    )
    return info.arn
