"""The Tinker dialect over the typed control plane, without the SDK or a server: checkpoints
found by their path as the package's key, in a home written before keys (path in the
description) too; the dialect's state owners (heartbeats.py, model_table.py); and the
sampler a save_weights_and_get_sampling_client makes belonging to its Tinker session."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from testkit import old_package, stub_service

from localsession.server.tinker import rest, results
from localsession.server.tinker.dialect import Dialect
from localsession.server.tinker.heartbeats import Heartbeats
from localsession.server.tinker.model_table import Model, ModelTable

RUN = "0f0e0d0c-0000-4000-8000-000000000001:train:0"
OLD = f"tinker://{RUN}/weights/before-keys"
WAIT_S = 60.0


def _old_home(home: Path) -> None:
    """A checkpoint as the dialect saved it before packages had keys (its path as the
    description, no ``key``), adapting the head; and a SageMaker package beside it."""
    old_package(home, OLD, targets=["q_proj", "lm_head"])
    old_package(home, "a SageMaker checkpoint", targets=["q_proj", "lm_head"])


@pytest.fixture
def dialect(tmp_path: Path) -> Any:
    _old_home(tmp_path)
    service, _ = stub_service(tmp_path, session=None)
    yield Dialect(service)
    service.close()


def test_a_checkpoint_saved_before_keys_is_listed_and_resolved(dialect: Dialect) -> None:
    arn = dialect.checkpoints.package_of(OLD)
    info = dialect.checkpoints.info(OLD)
    assert info.arn == arn and (info.base_model, info.rank, info.adapts_head) == (
        "localsession/tiny",
        8,
        True,
    )
    listed = rest.checkpoints(dialect)
    assert [c["tinker_path"] for c in listed] == [OLD]  # the SageMaker package is not one
    assert listed[0]["checkpoint_id"] == "weights/before-keys"
    assert listed[0]["checkpoint_type"] == "training"
    run = rest.training_run(dialect, RUN, listed)  # a run this server never made
    assert (run["base_model"], run["lora_rank"]) == ("localsession/tiny", 8)
    rest.expire(dialect)  # no TTL: nothing deleted
    dialect.checkpoints.set_ttl(OLD, 0)
    rest.expire(dialect)  # due at once: deleted by its key
    assert rest.checkpoints(dialect) == []
    assert dialect.checkpoints.package_of(OLD, required=False) == ""


def _saved_for_sampler(dialect: Dialect) -> tuple[str, Any]:
    session_id = dialect.create_session()
    created = dialect.futures.get(
        dialect.create_model({"session_id": session_id, "base_model": "localsession/tiny"})
    )
    assert dialect.service.wait_for_session(created.session or "", WAIT_S) == "Running"
    model_id = str(created.model_id)
    request = {"model_id": model_id, "seq_id": 1, "sampling_session_seq_id": 0}
    future = dialect.futures.get(dialect.save(request, sampler=True))
    assert dialect.service.wait_operation(future.session or "", future.op_id or "", WAIT_S)
    return session_id, future


def test_a_new_save_is_keyed_by_its_path_and_its_sampler_is_its_sessions(
    dialect: Dialect,
) -> None:
    session_id, future = _saved_for_sampler(dialect)
    path = future.extra["path"]
    found = dialect.service.control.find_package(path, "tinker://")
    assert found is not None and found.key == path
    assert found.description == f"Tinker checkpoint {path}"
    # the sampler is made when the save completes (its callback runs just after the op's
    # waiters wake), before and whether or not anyone reads the result
    deadline = time.monotonic() + WAIT_S
    while not dialect.samplers.all() and time.monotonic() < deadline:
        time.sleep(0.01)
    (sampler,) = dialect.samplers.all()
    assert sampler.session_id == session_id and sampler.model_path == path
    assert sampler.package == found.arn and sampler.model_id == future.model_id
    outcome = dialect.service.operation_outcome(future.session or "", future.op_id or "")
    assert outcome.result is not None
    first = json.loads(bytes(results.completed(dialect, future, outcome.result).body))
    again = json.loads(bytes(results.completed(dialect, future, outcome.result).body))
    assert first["sampling_session_id"] == again["sampling_session_id"] == sampler.sampler_id
    assert dialect.samplers.all() == [sampler]  # reading made none


def test_heartbeats_live_due_finished() -> None:
    beats = Heartbeats()
    assert beats.beat("a") and beats.beat("b")
    seen = beats.live()
    assert set(seen) == {"a", "b"}
    assert beats.due(seen["a"] + 5, timeout=10) == []
    assert sorted(beats.due(max(seen.values()) + 11, timeout=10)) == ["a", "b"]
    beats.finish("a")
    assert not beats.beat("a")  # a finished session's heartbeat is refused
    assert set(beats.live()) == {"b"} and beats.finished() == {"a"}
    assert beats.known("a") and beats.known("b") and not beats.known("c")
    beats.touch("c")  # a request of a session never seen adopts nothing
    assert not beats.known("c")


def test_the_model_table_groups_by_session_and_shifts_numbers() -> None:
    table = ModelTable()
    first = Model("s1:train:0", "tinker-1", "m", 4, {}, None)
    table.add(first)
    table.add(Model("s1:train:1", "tinker-2", "m", 4, {}, None))
    table.add(Model("s2:train:0", "tinker-3", "m", 4, {}, None))
    assert [m.session for m in table.of_session("s1")] == ["tinker-1", "tinker-2"]
    assert table.ids() == ["s1:train:0", "s1:train:1", "s2:train:0"]
    assert first.owner == "s1" and table.get("nope") is None
    table.shift(first)
    table.shift(first)
    assert table.get("s1:train:0") is first and first.offset == 2
