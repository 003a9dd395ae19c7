"""Record the unmodified SDK's GRPO loop through ``localsession record`` in front of
``localsession serve``, then replay it with the server gone: the loop sees the same values.
A cassette holds no credential, signature or secret; a request the recording lacks fails at
once, naming the closest recorded request."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import mock_blog as blog
import pytest
from parity_support import (
    CLIENT_KEY,
    CLIENT_SECRET,
    MAP,
    UPSTREAM_KEY,
    UPSTREAM_SECRET,
    UPSTREAM_TOKEN,
    Recording,
)

import localsession
from localsession.parity.cassette import find, load
from localsession.parity.normalise import strip_numbers
from localsession.parity.replay import Replayer, replay_app
from localsession.server.hosting import AppThread

pytestmark = pytest.mark.integration
BY_ID = "openai/gpt-oss-20b"


def test_the_recording_ran_the_loop_through_the_proxy(recording: Recording) -> None:
    cassette = load(recording.out)
    operations = [
        json.dumps(e["request"]["body"]) for e in cassette.exchanges if e["request"]["body"]
    ]
    # 2 steps: forward_backward + optim_step each, through the upstream's signature check.
    assert sum('"forwardBackward"' in op for op in operations) == 2
    assert sum('"optimizerStep"' in op for op in operations) == 2
    assert all(e["response"]["status"] == 200 for e in cassette.exchanges)
    assert len(recording.signatures) == len(cassette.exchanges)
    assert len(recording.seen["tokens"]) == 2 * len(blog.QUESTIONS) * 2


def test_replay_with_serve_stopped_gives_identical_results(
    recording: Recording, sdk_at: Callable[[str, str], None]
) -> None:
    replayer = Replayer.from_path(recording.out)
    with AppThread(replay_app(replayer)) as url:  # what `serve --replay` runs
        sdk_at(url, recording.hf_cache)
        replayed = blog.grpo(BY_ID, steps=2, group=2, concurrent=False)
    assert replayer.misses == []
    assert replayed == recording.seen  # tokens, logprobs, metrics (mfu too), the ARN
    # Every distinct recorded request was replayed (a poll or a retry the recording repeated
    # under load may be answered once fewer).
    keys = [
        json.dumps(strip_numbers(e["request"]), sort_keys=True) for e in replayer.cassette.exchanges
    ]
    assert {keys[i] for i in replayer.used} == set(keys)


def test_mock_replay_gives_identical_results(recording: Recording) -> None:
    with localsession.mock(replay=recording.out, model_map=MAP) as m:
        replayed = blog.grpo(BY_ID, steps=2, group=2, concurrent=False)
        assert m.replayer.misses == []
    assert replayed == recording.seen


def test_a_cassette_holds_no_credential_signature_or_secret(recording: Recording) -> None:
    text = find(recording.out).read_text()
    planted = [UPSTREAM_KEY, UPSTREAM_SECRET, UPSTREAM_TOKEN, CLIENT_KEY, CLIENT_SECRET]
    for secret in [*planted, *recording.signatures]:
        assert secret not in text
    for marker in ("AWS4-HMAC-SHA256", "Signature=", "X-Amz-Security-Token", "Credential="):
        assert marker.lower() not in text.lower()
    assert recording.signatures and all(len(s) == 64 for s in recording.signatures)


def test_secrets_in_bodies_and_queries_are_not_written(tmp_path: Any) -> None:
    """A body key naming a credential is dropped; a known secret is scrubbed wherever it
    is; signature parameters leave the query."""
    from localsession.parity.cassette import request_record
    from localsession.parity.normalise import Normaliser

    norm = Normaliser([UPSTREAM_SECRET])
    body = {
        "SecretAccessKey": "body-secret-1",
        "Nested": {"password": "body-secret-2", "SessionToken": "body-secret-3"},
        "Note": f"echo {UPSTREAM_SECRET} here",
        "tokens": [1, 2, 3],
    }
    record = request_record(
        norm,
        "POST",
        "/",
        "X-Amz-Signature=abc123&X-Amz-Credential=AKIAX%2F20260101&prefix=out",
        {"Content-Type": "application/json", "Authorization": "AWS4-HMAC-SHA256 x"},
        json.dumps(body).encode(),
    )
    text = json.dumps(record)
    for secret in ("body-secret", UPSTREAM_SECRET, "abc123", "AKIAX", "AWS4"):
        assert secret not in text
    assert record["body"]["json"]["tokens"] == [1, 2, 3]
    assert record["query"] == "prefix=out"


def test_unmatched_request_fails_with_the_closest_and_does_not_hang(
    recording: Recording,
) -> None:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with localsession.mock(replay=recording.out, model_map=MAP) as m:
                try:  # 3 samples per prompt where the recording has 2
                    blog.grpo(BY_ID, steps=2, group=3, concurrent=False)
                except Exception as exc:  # noqa: BLE001 - the SDK's error is the result
                    outcome["error"] = exc
                outcome["misses"] = list(m.replayer.misses)
        except BaseException as exc:  # noqa: BLE001
            outcome["crash"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the replay of an unmatched request hung"
    assert "crash" not in outcome, outcome.get("crash")
    message = str(outcome["error"])
    assert "ReplayMismatchException" in message
    assert "Closest recorded request" in message
    assert "numSamples: 3, recorded 2" in message
    assert outcome["misses"] and "sampling-operations" in outcome["misses"][0]
