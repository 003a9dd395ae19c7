"""Streamed chat completions send tokens as they are decoded, not when generation ends.

Made deterministic with the sampler's step hook (``sampling.add_step_hook``), not a timer:
the hook holds the decoder after its first step until the client has received a chunk with
that step's token. Were the stream sent only at the end, that chunk could never arrive while
the decoder is held, and the hook's wait would time out first.
"""

from __future__ import annotations

import threading
from typing import Any

import openai

from localsession import TrainingClient
from localsession.engine.sampling import add_step_hook

from .common import Running

MESSAGES = [{"role": "user", "content": "Tell me a story."}]
#: Seconds the decoder is held at most, waiting for the first chunk to reach the client.
HOLD_S = 600.0


def test_first_chunk_arrives_while_decoding_is_held(
    server: Running, session: TrainingClient
) -> None:
    oai: Any = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    kwargs: dict[str, Any] = {
        "model": session.training_session_name,
        "messages": MESSAGES,
        "max_tokens": 24,
        "seed": 3,
    }
    held, released = threading.Event(), threading.Event()
    steps: list[int] = []

    gave_up = threading.Event()

    def hook(step: int) -> None:
        steps.append(step)
        if step == 1:
            held.set()
            # The client releases it on the first token's chunk. The bound only ends a hold
            # no chunk can end (a stream sent at the end), sized for a loaded machine.
            if not released.wait(HOLD_S):
                gave_up.set()

    remove = add_step_hook(hook)
    try:
        stream = oai.chat.completions.create(**kwargs, stream=True, logprobs=True)
        first_seen_while_held = None
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            if first_seen_while_held is None and chunk.choices and chunk.choices[0].logprobs:
                first_seen_while_held = held.is_set() and not released.is_set()
                decoded_so_far = len(steps)
                released.set()
    finally:
        released.set()
        remove()
    assert not gave_up.is_set(), f"no chunk arrived in {HOLD_S} s while decoding was held"
    assert first_seen_while_held is True
    assert decoded_so_far == 1  # only one decode step had run when the first token arrived
    assert len(steps) > 1  # and decoding went on afterwards
    whole = oai.chat.completions.create(**kwargs, logprobs=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    streamed_lps = [
        t.logprob
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content
    ]
    assert streamed_lps == [t.logprob for t in whole.choices[0].logprobs.content]


def test_concurrent_streams_are_batched_and_each_complete(
    server: Running, session: TrainingClient
) -> None:
    oai: Any = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    results: dict[int, str] = {}

    def run(seed: int) -> None:
        stream = oai.chat.completions.create(
            model=session.training_session_name,
            messages=MESSAGES,
            max_tokens=16,
            seed=seed,
            stream=True,
            stop=["ab"],
        )
        results[seed] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for seed in range(4):
        whole = oai.chat.completions.create(
            model=session.training_session_name,
            messages=MESSAGES,
            max_tokens=16,
            seed=seed,
            stop=["ab"],
        )
        assert results[seed] == whole.choices[0].message.content
