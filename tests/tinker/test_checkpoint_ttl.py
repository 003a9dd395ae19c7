"""A save's ``ttl_seconds`` is recorded when the save completes, never when its result is
read: a save whose future nobody reads still expires, and reading its result twice does not
restart its TTL (server/tinker/checkpoints.py).

The saves go through the SDK's own HTTP client (``tinker._client.AsyncTinker``), which submits a
request and reads its future only when asked, unlike ``TrainingClient``, whose futures poll
at once. The clock TTLs are set and checked by is moved forward instead of waiting an hour.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

from tinker._client import AsyncTinker  # noqa: E402

from localsession.server.tinker import checkpoints  # noqa: E402

pytestmark = pytest.mark.localsession_tinker(engine="fake")
MODEL = "localsession/tiny"
TTL = 3600  # the SDK's shortest TTL


@pytest.fixture
def sc(localsession_tinker: Any) -> Any:
    client = tinker.ServiceClient()
    yield client
    client.close("success").result()


async def _save(model_id: str, name: str, reads: int, between: Any = None) -> list[Any]:
    """Submit a ``save_weights`` (the model's first request, seq_id 1) with a TTL, then read
    its future ``reads`` times (``between()`` runs after each read); the answers."""
    request = types.SaveWeightsRequest(model_id=model_id, path=name, seq_id=1, ttl_seconds=TTL)
    answers = []
    async with AsyncTinker() as client:
        future = await client.weights.save(request=request)
        for _ in range(reads):
            while True:
                raw = await client.futures.with_raw_response.retrieve(
                    request=types.FutureRetrieveRequest(request_id=future.request_id)
                )
                answer = raw.http_response.json()  # the body (the SDK's union reads it loosely)
                if answer.get("type") != "try_again":
                    break
            answers.append(answer)
            if between is not None:
                between()
    return answers


def _rest(sc: Any) -> Any:
    """A RestClient on this test's server: ``sc``'s (``tinker.RestClient()`` would keep
    the SDK's shared client on this server for the tests after this one)."""
    with pytest.warns(FutureWarning):  # deprecated, and the way to bind it to ``sc``
        return sc.create_rest_client()


def _entry(rest: Any, run: str, path: str) -> Any:
    found = [c for c in rest.list_checkpoints(run).result().checkpoints if c.tinker_path == path]
    return found[0] if found else None


def _expiry(rest: Any, run: str, path: str, within: float = 30.0) -> datetime:
    """The listed ``expires_at`` of ``path``, once the save that made it has completed."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        entry = _entry(rest, run, path)
        if entry is not None and entry.expires_at is not None:
            return entry.expires_at
        time.sleep(0.05)
    raise AssertionError(f"{path} was not listed with an expiry within {within}s")


def test_a_save_whose_future_is_never_read_still_expires(
    sc: Any, localsession_tinker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    before = datetime.now(timezone.utc)
    asyncio.run(_save(tc.model_id, "unread", reads=0))
    path = f"tinker://{tc.model_id}/weights/unread"
    rest = _rest(sc)
    expires = _expiry(rest, tc.model_id, path)
    after = datetime.now(timezone.utc)
    assert before + timedelta(seconds=TTL) <= expires <= after + timedelta(seconds=TTL)
    later = expires + timedelta(seconds=1)
    monkeypatch.setattr(checkpoints, "utcnow", lambda: later)
    assert _entry(rest, tc.model_id, path) is None  # expired: deleted when listed
    registry = localsession_tinker.service.registry
    assert path not in {p.key for p in registry.list("sagemaker-default")}


def test_reading_a_save_twice_does_not_restart_its_ttl(
    sc: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    path = f"tinker://{tc.model_id}/weights/read-twice"
    moved = datetime.now(timezone.utc) + timedelta(seconds=1000)
    read: list[datetime] = []

    def move_clock() -> None:  # the second read comes "1000 s" after the first
        read.append(datetime.now(timezone.utc))
        monkeypatch.setattr(checkpoints, "utcnow", lambda: moved, raising=False)
        time.sleep(0.01)  # and later by the real clock too

    before = datetime.now(timezone.utc)
    first, second = asyncio.run(_save(tc.model_id, "read-twice", reads=2, between=move_clock))
    assert first["path"] == second["path"] == path
    expires = _expiry(_rest(sc), tc.model_id, path)
    # set once, when the save completed (before the first read ended), not at the second
    assert before + timedelta(seconds=TTL) <= expires <= read[0] + timedelta(seconds=TTL)
