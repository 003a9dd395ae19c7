"""The runtime's op events as a Chrome trace (trace-event JSON: ui.perfetto.dev and
chrome://tracing open it).

One process per runtime session, its threads the tracks:

- ``training ops``: one complete span (``X``) per training op, from its start to its finish,
  named ``<seq> <kind>``; ops run one at a time in sequence order, so the spans follow one
  another and never overlap. The time an op waited in the queue is an async span
  (``queued <seq>``) from its submit to its start.
- ``sampling batches``: one complete span per sampling batch (the scheduler runs one at a
  time), its args the ops it ran and the tokens it sampled.
- ``sampling requests``: one async span per sampling request, from submit to finish, its
  args the batch it rode in.
- counters: ``queue depth`` (training ops submitted and not yet started) and ``tokens/s``
  (training: an op's tokens over its run time; sampling: a batch's over its run time).

Times are microseconds since the first event (``otherData.t0`` is that moment, epoch
seconds). Pure: it reads :class:`~localsession.runtime.events.OpEvent` values, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from localsession.runtime.events import OpEvent, Phase

#: The track (thread) ids inside each session's process.
TRAINING_TID, BATCH_TID, REQUEST_TID = 1, 2, 3
_TRACK_NAMES = {
    TRAINING_TID: "training ops",
    BATCH_TID: "sampling batches",
    REQUEST_TID: "sampling requests",
}


def chrome_trace(
    events: Iterable[OpEvent], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The trace of ``events`` (any sessions, any order); ``labels`` names a session's
    process (by default its name)."""
    ordered = sorted(events, key=lambda e: (e.t, e.cursor))
    t0 = ordered[0].t if ordered else 0.0
    out: list[dict[str, Any]] = []
    pids: dict[str, int] = {}

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 1)

    def pid_of(session: str) -> int:
        if session not in pids:
            pid = pids[session] = len(pids) + 1
            name = (labels or {}).get(session, session)
            out.append(_meta("process_name", pid, 0, name))
            out.append(_meta("process_sort_index", pid, 0, pid))
            for tid, track in _TRACK_NAMES.items():
                out.append(_meta("thread_name", pid, tid, track))
                out.append(_meta("thread_sort_index", pid, tid, tid))
        return pids[session]

    submitted: dict[str, OpEvent] = {}
    started: dict[str, OpEvent] = {}
    batch_of: dict[str, int] = {}
    depth: dict[str, int] = {}
    for event in ordered:
        if event.phase == Phase.BATCH:
            for op in event.ops:
                batch_of[op] = event.batch or 0
    for event in ordered:
        pid = pid_of(event.session)
        training = event.seq is not None
        if event.phase == Phase.SUBMITTED:
            submitted[event.op_id] = event
            if training:
                depth[event.session] = depth.get(event.session, 0) + 1
                out.append(_counter(pid, us(event.t), "queue depth", depth[event.session]))
                out.append(_async("b", pid, us(event.t), f"queued {event.seq}", event.op_id))
            else:
                args = {"kind": event.kind, "op": event.op_id}
                out.append(_async("b", pid, us(event.t), event.kind, event.op_id, args))
        elif event.phase == Phase.STARTED:
            started[event.op_id] = event
            if training and event.op_id in submitted:
                depth[event.session] = max(0, depth.get(event.session, 0) - 1)
                out.append(_counter(pid, us(event.t), "queue depth", depth[event.session]))
                out.append(_async("e", pid, us(event.t), f"queued {event.seq}", event.op_id))
        elif event.phase == Phase.FINISHED:
            out.extend(_finished(event, pid, us, submitted, started, batch_of, depth))
        elif event.phase == Phase.BATCH and event.end is not None:
            seconds = max(event.end - event.t, 1e-9)
            ran: dict[str, Any] = {"ops": list(event.ops), "tokens": event.tokens}
            ran["requests"] = len(event.ops)
            name = f"batch {event.batch} ({len(event.ops)} {event.kind})"
            out.append(_span(pid, BATCH_TID, us(event.t), us(event.end), name, ran))
            if event.tokens:
                rate = round(event.tokens / seconds, 1)
                out.append(_counter(pid, us(event.end), "tokens/s", rate, "sampling"))
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {"source": "localsession", "t0": t0},
    }


def _finished(
    event: OpEvent,
    pid: int,
    us: Any,
    submitted: dict[str, OpEvent],
    started: dict[str, OpEvent],
    batch_of: dict[str, int],
    depth: dict[str, int],
) -> list[dict[str, Any]]:
    """The spans an op's finish closes (its run, or an instant if it never started)."""
    out: list[dict[str, Any]] = []
    begun = started.get(event.op_id)
    args: dict[str, Any] = {"kind": event.kind, "status": event.status, "op": event.op_id}
    if event.seq is not None:
        args["seq"] = event.seq
    if event.error:
        args["error"] = event.error
    args.update(event.metrics)
    if event.seq is None:  # a sampling request: close its async span
        if event.op_id in batch_of:
            args["batch"] = batch_of[event.op_id]
        if event.tokens:
            args["tokens"] = event.tokens
        if event.op_id in submitted:
            out.append(_async("e", pid, us(event.t), event.kind, event.op_id, args))
        return out
    name = f"{event.seq} {event.kind}"
    if begun is None:  # skipped (or failed) before it ran: an instant, its queue span closed
        if event.op_id in submitted:
            depth[event.session] = max(0, depth.get(event.session, 0) - 1)
            out.append(_counter(pid, us(event.t), "queue depth", depth[event.session]))
            out.append(_async("e", pid, us(event.t), f"queued {event.seq}", event.op_id))
        out.append(
            {"ph": "i", "s": "t", "pid": pid, "tid": TRAINING_TID, "ts": us(event.t)}
            | {"name": name, "args": args}
        )
        return out
    if event.tokens:
        args["tokens"] = event.tokens
    out.append(_span(pid, TRAINING_TID, us(begun.t), us(event.t), name, args))
    if event.tokens:
        rate = round(event.tokens / max(event.t - begun.t, 1e-9), 1)
        out.append(_counter(pid, us(event.t), "tokens/s", rate, "training"))
    return out


def _meta(name: str, pid: int, tid: int, value: object) -> dict[str, Any]:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}}


def _span(
    pid: int, tid: int, start: float, end: float, name: str, args: dict[str, Any]
) -> dict[str, Any]:
    duration = max(round(end - start, 1), 0.0)
    return {"ph": "X", "pid": pid, "tid": tid, "ts": start, "dur": duration, "name": name} | {
        "cat": _TRACK_NAMES[tid],
        "args": args,
    }


def _async(
    phase: str, pid: int, ts: float, name: str, op_id: str, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An async span's begin (``b``) or end (``e``), on the requests track."""
    cat = "queue" if name.startswith("queued") else "sampling"
    event = {"ph": phase, "pid": pid, "tid": REQUEST_TID, "ts": ts, "name": name, "cat": cat}
    event["id"] = op_id  # an op id (a UUID): unique across the whole trace
    if args:
        event["args"] = args
    return event


def _counter(pid: int, ts: float, name: str, value: float, series: str = "value") -> dict[str, Any]:
    return {"ph": "C", "pid": pid, "ts": ts, "name": name, "args": {series: value}}
