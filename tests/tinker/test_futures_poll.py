"""``retrieve_futures`` and ``join_sampling_session``: the SDK's sampling-session poller and
clone ids, through the unmodified SDK and as raw requests built from the SDK's own types.

The server's client config turns both on (``sample_use_retrieve_futures``,
``sample_join_sampling_session``), so every ``SamplingClient.sample`` of the 0.38 SDK waits
on the poller, and an unpickled ``SamplingClient`` joins its session before sampling.
"""

from __future__ import annotations

import pickle
from typing import Any

import httpx
import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types
from tinker.types.futures_retrieve_request import (  # noqa: E402
    FuturesRetrieveRequest,
    SamplingSessionFuturesTarget,
)
from tinker.types.futures_retrieve_response import FuturesRetrieveResponse  # noqa: E402

pytestmark = pytest.mark.localsession_tinker(engine="fake")
HEADERS = {"X-API-Key": "tml-localsession"}
MODEL = "localsession/tiny"


def _call(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/{path}", json=body, headers=HEADERS, timeout=40)


def _poll(url: str, sampler: str, prev: int, **options: Any) -> FuturesRetrieveResponse:
    clone = options.pop("clone", 0)
    request = FuturesRetrieveRequest(
        target=SamplingSessionFuturesTarget(sampling_session_id=sampler, cloned_sampler_id=clone),
        prev_cursor=prev,
        **options,
    )
    sent = _call(url, "retrieve_futures", request.model_dump(mode="json", exclude_none=True))
    assert sent.status_code == 200, sent.text
    return FuturesRetrieveResponse.model_validate(sent.json())


def _asample(url: str, sampler: str, seq_id: int) -> str:
    request = types.SampleRequest(
        sampling_session_id=sampler,
        seq_id=seq_id,
        num_samples=2,
        prompt=types.ModelInput.from_ints([1, 2, 3]),
        sampling_params=types.SamplingParams(max_tokens=3, seed=1),
    )
    sent = _call(url, "asample", request.model_dump(mode="json", exclude_none=True))
    assert sent.status_code == 200, sent.text
    return str(sent.json()["request_id"])


def test_an_unpickled_sampling_client_joins_and_samples_through_the_poller(
    localsession_tinker: Any,
) -> None:
    sc = tinker.ServiceClient()
    sampler = sc.create_sampling_client(base_model=MODEL).result()
    params = types.SamplingParams(max_tokens=4, seed=3)
    prompt = types.ModelInput.from_ints([1, 2, 3, 4])
    first = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    clone = pickle.loads(pickle.dumps(sampler))
    again = clone.sample(prompt, num_samples=2, sampling_params=params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in first.sequences]
    # the clone took id 1 through join_sampling_session, so the next join gets 2
    sid = sampler._sampling_session_id
    joined = _call(localsession_tinker.url, "join_sampling_session", {"sampling_session_id": sid})
    assert joined.json() == {"type": "join_sampling_session", "client_counter": 2}
    assert clone._cloned_sampler_id == 1
    sc.close("success").result()


def test_retrieve_futures_reports_each_finished_request_once_per_clone(
    localsession_tinker: Any,
) -> None:
    url = localsession_tinker.url
    sc = tinker.ServiceClient()
    sid = sc.create_sampling_client(base_model=MODEL).result()._sampling_session_id

    empty = _poll(url, sid, 0, timeout=0)  # nothing yet: an immediate, empty answer
    assert empty.completions == [] and empty.cursor == 0

    first = _asample(url, sid, 1)
    got = _poll(url, sid, 0)  # long poll until the op is terminal
    assert [(c.state, c.request_id) for c in got.completions] == [("finished", first)]
    assert got.cursor > 0

    seen = _poll(url, sid, got.cursor, timeout=0.2)  # at or before the cursor: trimmed
    assert seen.completions == [] and seen.cursor == got.cursor

    clone_request = _asample(url, sid, 2 * 1_000_000_000 + 1)  # clone 2's seq_id block
    second = _asample(url, sid, 2)
    got2 = _poll(url, sid, got.cursor)
    assert [c.request_id for c in got2.completions] == [second]
    in_clone = _poll(url, sid, 0, clone=2)
    assert [c.request_id for c in in_clone.completions] == [clone_request]

    # the payload is fetched, then reported retrieved: the server forgets the future
    fetched = _call(url, "retrieve_future", {"request_id": second})
    assert fetched.status_code == 200
    _poll(url, sid, got2.cursor, timeout=0, retrieved_request_ids=[second])
    assert _call(url, "retrieve_future", {"request_id": second}).status_code == 404

    unknown = _call(url, "retrieve_futures", {"target": {"sampling_session_id": "nope"}})
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    no_join = _call(url, "join_sampling_session", {"sampling_session_id": "nope"})
    assert no_join.status_code == 404
    sc.close("success").result()
