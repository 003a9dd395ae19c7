"""The runtime's op events (runtime/events.py) and their Chrome trace (runtime/trace.py), with
a recording engine (no torch).

Checks: every op's submit, start and finish is logged in that order with the op's metrics;
training ops start in sequence order even when they arrive out of order; sampling requests
are logged with the batch they rode in; the log stays bounded; and the trace's spans nest,
follow sequence order and cover every op.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from testkit import forward_backward, spans_nest, stub_service

from localsession.runtime.events import EventLog, Phase
from localsession.runtime.service import Service
from localsession.runtime.trace import BATCH_TID, TRAINING_TID, chrome_trace


def optim(seq: int, lr: float) -> dict[str, Any]:
    return {
        "sequenceNumber": seq,
        "clientToken": f"opt-{seq}",
        "operationConfig": {"optimizerStep": {"adamParamsConfig": {"learningRate": lr}}},
    }


def sample_request() -> dict[str, Any]:
    return {
        "operationConfig": {
            "sample": {
                "numSamples": 1,
                "samplingParams": {"maxTokens": 2},
                "prompt": {"chunks": [{"tokens": [1, 2]}]},
            }
        }
    }


@pytest.fixture
def service(tmp_path: Path) -> Any:
    service, _ = stub_service(tmp_path, gap_timeout=600.0, strict=False)
    yield service
    service.close()


def run_loop(service: Service) -> list[str]:
    """Ops 2 then 1 (out of order), then 3 and 4; returns their ids in sequence order."""
    ids = [service.execute_training_operation("s1", forward_backward(2, 20))["operationId"]]
    ids.insert(0, service.execute_training_operation("s1", forward_backward(1, 10))["operationId"])
    ids.append(service.execute_training_operation("s1", optim(3, 0.005))["operationId"])
    ids.append(service.execute_training_operation("s1", forward_backward(4, 40))["operationId"])
    for op in ids:
        assert service.wait_operation("s1", op, 60)
    return ids


def test_each_op_logs_submit_start_finish_in_sequence_order(service: Service) -> None:
    ids = run_loop(service)
    events = service.events.events("s1")
    phases = {op: [e.phase for e in events if e.op_id == op] for op in ids}
    assert all(p == [Phase.SUBMITTED, Phase.STARTED, Phase.FINISHED] for p in phases.values())
    started = [e.seq for e in events if e.phase == Phase.STARTED]
    assert started == [1, 2, 3, 4]  # op 2 arrived first but started second
    submitted = [e.seq for e in events if e.phase == Phase.SUBMITTED]
    assert submitted == [2, 1, 3, 4]
    finished = {e.seq: e for e in events if e.phase == Phase.FINISHED}
    # the stub engine's own values: loss 1.0 over 1 token; the step's learning rate
    assert finished[1].metrics["loss"] == 1.0 and finished[1].tokens == 1
    assert finished[3].metrics["learning_rate"] == 0.005
    assert all(e.status == "Completed" for e in finished.values())
    cursors = [e.cursor for e in events]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
    assert service.events.events("s1", since=cursors[-2]) == events[-1:]


def test_a_retry_is_not_logged_twice(service: Service) -> None:
    first = service.execute_training_operation("s1", forward_backward(1, 10))["operationId"]
    again = service.execute_training_operation("s1", forward_backward(1, 10))["operationId"]
    assert first == again and service.wait_operation("s1", first, 60)
    assert [e.phase for e in service.events.events("s1")].count(Phase.SUBMITTED) == 1


def test_sampling_requests_are_logged_with_their_batch(service: Service) -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def submit() -> None:
        op = service.execute_sampling_operation("s1", sample_request())["operationId"]
        with lock:
            ids.append(op)

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for op in ids:
        assert service.wait_operation("s1", op, 60)
    events = service.events.events("s1")
    batches = [e for e in events if e.phase == Phase.BATCH]
    in_batches = [op for b in batches for op in b.ops]
    assert sorted(in_batches) == sorted(ids)  # every request rode in exactly one batch
    for batch in batches:
        assert batch.end is not None and batch.end >= batch.t
        for op in batch.ops:  # it started no earlier than its batch and ended in it
            (start,) = [e for e in events if e.op_id == op and e.phase == Phase.STARTED]
            (end,) = [e for e in events if e.op_id == op and e.phase == Phase.FINISHED]
            assert batch.t <= start.t <= end.t <= batch.end


def test_the_log_is_bounded_per_session_and_in_sessions() -> None:
    log = EventLog(per_session=3, max_sessions=2)
    for i in range(5):
        log.op("a", Phase.SUBMITTED, f"op{i}", "forward", i + 1)
    assert [e.op_id for e in log.events("a")] == ["op2", "op3", "op4"]
    log.op("b", Phase.SUBMITTED, "x", "forward", 1)
    log.op("c", Phase.SUBMITTED, "y", "forward", 1)
    assert log.sessions() == ["b", "c"] and log.events("a") == []
    with pytest.raises(ValueError):
        EventLog(per_session=0)


def test_the_log_is_bounded_in_all() -> None:
    log = EventLog(per_session=10, max_sessions=8, max_events=5)
    for i in range(3):
        log.op("a", Phase.SUBMITTED, f"a{i}", "forward", i + 1)
    for i in range(4):
        log.op("b", Phase.SUBMITTED, f"b{i}", "forward", i + 1)
    # five in all: "a" (active least recently) lost its oldest two, "b" kept all four
    assert [e.op_id for e in log.events()] == ["a2", "b0", "b1", "b2", "b3"]
    log.op("b", Phase.SUBMITTED, "b4", "forward", 5)  # "a" empties and is forgotten
    assert log.sessions() == ["b"] and [e.op_id for e in log.events()] == [
        "b0", "b1", "b2", "b3", "b4"
    ]  # fmt: skip
    # a session's own bound and the total agree: the per-session drop is counted
    small = EventLog(per_session=2, max_sessions=8, max_events=3)
    for i in range(4):
        small.op("a", Phase.SUBMITTED, f"a{i}", "forward", i + 1)
    small.op("b", Phase.SUBMITTED, "b0", "forward", 1)
    assert [e.op_id for e in small.events()] == ["a2", "a3", "b0"]
    small.op("b", Phase.SUBMITTED, "b1", "forward", 2)
    assert [e.op_id for e in small.events()] == ["a3", "b0", "b1"]


def test_spans_nest_tells_a_stack_from_an_overlap() -> None:
    inside = [{"ts": 0, "dur": 10}, {"ts": 2, "dur": 3}, {"ts": 10, "dur": 1}]
    assert spans_nest(inside)
    assert not spans_nest([{"ts": 0, "dur": 10}, {"ts": 5, "dur": 10}])


def test_the_trace_has_every_op_in_order_and_its_spans_nest(service: Service) -> None:
    ids = run_loop(service)
    op = service.execute_sampling_operation("s1", sample_request())["operationId"]
    assert service.wait_operation("s1", op, 60)
    trace = json.loads(json.dumps(chrome_trace(service.events.events(), {"s1": "session s1"})))
    events = trace["traceEvents"]
    names = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert [e["args"]["name"] for e in names] == ["session s1"]
    training = [e for e in events if e["ph"] == "X" and e["tid"] == TRAINING_TID]
    assert [e["args"]["op"] for e in sorted(training, key=lambda e: e["ts"])] == ids
    assert [e["args"]["seq"] for e in sorted(training, key=lambda e: e["ts"])] == [1, 2, 3, 4]
    assert spans_nest(training)
    # ops run one at a time: each starts after the one before it ended
    ordered = sorted(training, key=lambda e: e["ts"])
    pairs = zip(ordered, ordered[1:], strict=False)
    assert all(a["ts"] + a["dur"] <= b["ts"] + 0.2 for a, b in pairs)  # (0.1 us rounding)
    batches = [e for e in events if e["ph"] == "X" and e["tid"] == BATCH_TID]
    assert [b["args"]["ops"] for b in batches] == [[op]] and spans_nest(batches)
    begins = {e["id"] for e in events if e["ph"] == "b"}
    ends = {e["id"] for e in events if e["ph"] == "e"}
    assert begins == ends == {*ids, op}  # each queue wait and request span is closed
    depth = [e["args"]["value"] for e in events if e["name"] == "queue depth"]
    assert min(depth) == 0 and depth[-1] == 0 and max(depth) >= 1
    assert any(e["ph"] == "C" and e["name"] == "tokens/s" for e in events)


def test_a_skipped_op_is_an_instant_and_the_empty_trace_is_valid(tmp_path: Path) -> None:
    assert chrome_trace([])["traceEvents"] == []
    service, _ = stub_service(tmp_path, gap_timeout=600.0, strict=False)
    try:
        late = service.execute_training_operation("s1", forward_backward(2, 20))["operationId"]
        service.stop_training_session({"TrainingSessionName": "s1"})
        assert service.wait_operation("s1", late, 60)
        events = chrome_trace(service.events.events("s1"))["traceEvents"]
        (instant,) = [e for e in events if e["ph"] == "i"]
        assert instant["args"]["status"] == "Skipped" and instant["args"]["seq"] == 2
        assert [e["args"]["value"] for e in events if e["name"] == "queue depth"] == [1, 0]
    finally:
        service.close()
