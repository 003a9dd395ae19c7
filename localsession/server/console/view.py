"""What the console shows, as JSON: the sessions of both dialects, one session's events,
samples and packages, and the Tinker sessions with their training runs and samplers.

Read-only: everything here reads the :class:`Service` (its sessions, its event log,
runtime/events.py, its package registry) and, for Tinker's names, the dialect's tables,
through the narrow :class:`TinkerTables` view. Times are ISO 8601 in UTC; a monotonic
clock reading (a session's last activity, a Tinker heartbeat) is turned into wall time.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from localsession import vocab
from localsession.port_results import SampleResult
from localsession.runtime.events import OpEvent
from localsession.runtime.service import Service
from localsession.runtime.sessions.lifecycle import Session

if TYPE_CHECKING:
    from localsession.server.tinker.heartbeats import Heartbeats
    from localsession.server.tinker.model_table import ModelTable
    from localsession.server.tinker.sampler_table import SamplerTable

#: Decoded samples a session page shows (the newest).
LATEST_SAMPLES = 8
#: Characters of one decoded sample kept.
SAMPLE_CHARS = 2000


class TinkerTables(Protocol):
    """What the console reads of the Tinker dialect (server/tinker/dialect.py)."""

    heartbeats: Heartbeats
    models: ModelTable
    samplers: SamplerTable


def iso(moment: datetime | float | None) -> str | None:
    """A datetime, or epoch seconds, as ISO 8601 UTC."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    return moment.astimezone(timezone.utc).isoformat()


def wall(monotonic: float) -> float:
    """Epoch seconds of a ``time.monotonic()`` reading."""
    return time.time() - (time.monotonic() - monotonic)


class Console:
    """The console's reads over one service and (when it serves Tinker) its dialect."""

    def __init__(self, service: Service, tinker: TinkerTables | None = None) -> None:
        self.service = service
        self.tinker = tinker

    # -- names -------------------------------------------------------------------------------

    def labels(self) -> dict[str, dict[str, str]]:
        """Runtime session -> its dialect, and for Tinker what it is (a training run or the
        sampler session of a base model) and the Tinker session it belongs to."""
        out: dict[str, dict[str, str]] = {}
        if self.tinker is None:
            return out
        for model in self.tinker.models.all():
            out[model.session] = {
                "dialect": "tinker",
                "label": f"training run {model.model_id}",
                "tinker_session": model.owner,
            }
        for key, name in self.tinker.samplers.hidden().items():
            out[name] = {"dialect": "tinker", "label": f"sampler on {key}"}
        return out

    def trace_labels(self, names: list[str] | None = None) -> dict[str, str]:
        """Each session's track name in a trace: its Tinker label, or its name."""
        labels = self.labels()
        chosen = names if names is not None else [s.name for s in self.service.sessions()]
        out = {}
        for name in chosen:
            label = labels.get(name, {}).get("label")
            out[name] = f"{name} ({label})" if label else f"session {name}"
        return out

    # -- sessions ----------------------------------------------------------------------------

    def session_row(self, session: Session, labels: dict[str, dict[str, str]]) -> dict[str, Any]:
        with session.lock:
            running = session.running_op
            row: dict[str, Any] = {
                "name": session.name,
                "arn": session.arn,
                "status": str(getattr(session.status, "value", session.status)),
                "base_model": session.spec.base_model,
                "rank": session.spec.rank,
                "last_received": session.queue.last_received,
                "next_seq": session.queue.next_seq,
                "running_seq": running.seq if running is not None else None,
                "queue_depth": len(session.queue),
                "error": session.error_details,
                "created": iso(session.creation_time),
                "last_activity": iso(wall(session.last_activity)),
                "ended": iso(session.end_time),
                "ops": len(session.ops),
                "usage": session.usage.wire(),
            }
        row.update({"dialect": "sagemaker", "label": ""})
        row.update(labels.get(session.name, {}))
        return row

    def sessions(self) -> list[dict[str, Any]]:
        """Every session, newest first."""
        labels = self.labels()
        found = sorted(self.service.sessions(), key=lambda s: s.creation_time, reverse=True)
        return [self.session_row(s, labels) for s in found]

    def tinker_sessions(self) -> list[dict[str, Any]]:
        """The Tinker client sessions: last heartbeat, training runs, samplers."""
        if self.tinker is None:
            return []
        ids: list[tuple[str, float | None, bool]] = [
            (sid, seen, True) for sid, seen in self.tinker.heartbeats.live().items()
        ]
        ids += [(sid, None, False) for sid in self.tinker.heartbeats.finished()]
        models = self.tinker.models.all()
        samplers = self.tinker.samplers.all()
        out = []
        for sid, seen, live in ids:
            runs = [
                {"model_id": m.model_id, "session": m.session, "base_model": m.base_model}
                for m in models
                if m.owner == sid
            ]
            mine = [
                {"sampler_id": s.sampler_id, "base_model": s.base_model, "path": s.model_path}
                for s in samplers
                if s.session_id == sid
            ]
            out.append(
                {
                    "session_id": sid,
                    "live": live,
                    "last_heartbeat": iso(wall(seen)) if seen is not None else None,
                    "training_runs": runs,
                    "samplers": mine,
                }
            )
        return out

    def runtime_sessions_of(self, tinker_session: str) -> list[str]:
        """The runtime sessions a Tinker session's ops ran on: its training runs', and the
        sampler sessions of the base models its samplers read."""
        if self.tinker is None:
            return []
        names = [m.session for m in self.tinker.models.of_session(tinker_session)]
        hidden = self.tinker.samplers.hidden()
        for sampler in self.tinker.samplers.all():
            if sampler.session_id == tinker_session and sampler.key in hidden:
                names.append(hidden[sampler.key])
        return list(dict.fromkeys(names))

    def known_tinker_session(self, tinker_session: str) -> bool:
        if self.tinker is None:
            return False
        return self.tinker.heartbeats.known(tinker_session)

    # -- one session -------------------------------------------------------------------------

    def detail(self, name: str, since: int) -> dict[str, Any]:
        """One session's row, its events after ``since``, latest samples and packages."""
        session = self.service.session(name)
        events = self.service.events.events(name, since)
        return {
            "session": self.session_row(session, self.labels()),
            "events": [event_json(e) for e in events],
            "cursor": events[-1].cursor if events else since,
            "samples": self.samples(session),
            "packages": self.packages(name),
        }

    def samples(self, session: Session) -> list[dict[str, Any]]:
        """The newest completed ``sample`` ops' sequences, decoded where the engine's
        tokenizer can (else their token ids)."""
        with session.lock:
            ops = [
                op
                for op in session.ops.values()
                if op.kind == vocab.OpKind.SAMPLE and isinstance(op.result, SampleResult)
            ][-LATEST_SAMPLES:]
            engine = session.engine
        tokenizer = None
        if engine is not None:
            try:
                tokenizer = engine.get_tokenizer()
            except Exception:  # noqa: BLE001 - token ids are shown instead
                tokenizer = None
        out = []
        for op in reversed(ops):
            assert isinstance(op.result, SampleResult)
            for sequence in op.result.sequences:
                text = None
                if tokenizer is not None:
                    try:
                        text = str(tokenizer.decode(sequence.tokens))[:SAMPLE_CHARS]
                    except Exception:  # noqa: BLE001 - token ids are shown instead
                        text = None
                out.append(
                    {
                        "op": op.id,
                        "finished": iso(wall(op.finished_at)) if op.finished_at else None,
                        "tokens": sequence.tokens[:SAMPLE_CHARS],
                        "text": text,
                        "stop_reason": sequence.stop_reason,
                    }
                )
        return out

    def packages(self, name: str) -> list[dict[str, Any]]:
        """The model packages (and Tinker checkpoints) this session saved, newest first."""
        return [
            {
                "arn": info.arn,
                "group": info.group,
                "version": info.version,
                "kind": info.kind,
                "created": iso(info.created),
                "description": info.description,
                "s3_uri": info.location,
                "download": f"packages/{info.group}/{info.version}/archive.tar",
            }
            for info in self.service.control.packages_of(name)
        ]


def event_json(event: OpEvent) -> dict[str, Any]:
    """An event as the page reads it (the phase as its word, empty fields left out)."""
    body = asdict(event)
    body["phase"] = event.phase.value
    body["metrics"] = dict(event.metrics)
    body["ops"] = list(event.ops)
    return {k: v for k, v in body.items() if v not in ("", None, [], {}) or k == "seq"}
