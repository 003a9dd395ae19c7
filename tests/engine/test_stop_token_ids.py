"""Stop token ids in the torch sampler: a stream ends the step it draws one of its request's
``stop_token_ids`` (the id kept as its last token, ``stop_reason`` ``"stop"``), so the
decoder runs exactly as many steps as tokens were returned, in a lone batch, in a shared
batch and for a request admitted into a running batch. Expected tokens come from an
independent run without stops: the stopped stream is its prefix up to the first stop id."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from localsession.engine.torch_engine import TorchEngine
from localsession.port import EngineInputError, SampleRequest

PROMPT = [257, *b"Once upon a time"]
FREE = SampleRequest(prompt=PROMPT, max_tokens=64, temperature=0.0)


def first_new_at(tokens: list[int], lo: int) -> int:
    """The first index >= ``lo`` whose token does not occur earlier in ``tokens``."""
    return next(i for i in range(lo, len(tokens)) if tokens[i] not in tokens[:i])


def test_greedy_stops_at_the_id_after_k_steps(
    tiny_engine: TorchEngine, decode_steps: list[int]
) -> None:
    (free,) = tiny_engine.sample(None, [FREE])
    tokens = free.sequences[0].tokens
    assert free.sequences[0].stop_reason == "length" and len(tokens) == 64
    assert decode_steps == [64]
    k = first_new_at(tokens, 5)
    (cut,) = tiny_engine.sample(None, [dataclasses.replace(FREE, stop_token_ids=(tokens[k],))])
    seq = cut.sequences[0]
    assert seq.tokens == tokens[: k + 1] and seq.stop_reason == "stop"
    assert seq.logprobs == pytest.approx(free.sequences[0].logprobs[: k + 1], abs=1e-5)
    assert decode_steps == [64, k + 1]  # the decoder stopped there: no step past the stop id


def test_sampled_streams_stop_at_their_first_stop_id(
    tiny_engine: TorchEngine, decode_steps: list[int]
) -> None:
    sampled = SampleRequest(prompt=PROMPT, max_tokens=40, seed=7, num_samples=3)
    (free,) = tiny_engine.sample(None, [sampled])
    runs = [s.tokens for s in free.sequences]
    assert all(len(r) == 40 for r in runs), runs
    stop = (runs[0][first_new_at(runs[0], 3)], runs[1][first_new_at(runs[1], 6)])
    (cut,) = tiny_engine.sample(None, [dataclasses.replace(sampled, stop_token_ids=stop)])
    lengths = []
    for run, seq in zip(runs, cut.sequences, strict=True):
        at = next((i for i, t in enumerate(run) if t in stop), None)
        expected = run if at is None else run[: at + 1]
        assert seq.tokens == expected
        assert seq.stop_reason == ("length" if at is None else "stop")
        lengths.append(len(expected))
    assert decode_steps[-1] == max(lengths) < 40


def test_a_stopped_request_leaves_its_batch_mates_alone(tiny_engine: TorchEngine) -> None:
    other = SampleRequest(prompt=[257, 65], max_tokens=30, seed=3, temperature=0.8)
    (free,) = tiny_engine.sample(None, [FREE])
    tokens = free.sequences[0].tokens
    k = first_new_at(tokens, 2)
    stopped = dataclasses.replace(FREE, stop_token_ids=(tokens[k],))
    together = tiny_engine.sample(None, [stopped, other])
    assert together[0].sequences[0].tokens == tokens[: k + 1]
    alone = tiny_engine.sample(None, [other])[0].sequences[0]
    assert together[1].sequences[0].tokens == alone.tokens


def test_an_admitted_request_stops_at_its_id(tiny_engine: TorchEngine) -> None:
    joiner = SampleRequest(prompt=[257, 66, 67], max_tokens=50, seed=2, temperature=0.0)
    free = tiny_engine.sample(None, [joiner])[0].sequences[0].tokens
    k = first_new_at(free, 4)
    calls = 0

    def admit(check: Callable[[SampleRequest], SampleRequest]) -> list[SampleRequest]:
        nonlocal calls
        calls += 1
        return [check(dataclasses.replace(joiner, stop_token_ids=(free[k],)))] if calls == 2 else []

    running = SampleRequest(prompt=PROMPT, max_tokens=60, seed=1)
    out = tiny_engine.sample(None, [running], admit=admit)
    joined = out[1].sequences[0]
    assert joined.tokens == free[: k + 1] and joined.stop_reason == "stop"


def test_an_id_outside_the_vocabulary_is_refused(tiny_engine: TorchEngine) -> None:
    with pytest.raises(EngineInputError, match=r"request 1: stop token id 259 .*\[0, 259\)"):
        tiny_engine.sample(None, [FREE, dataclasses.replace(FREE, stop_token_ids=(5, 259))])


def test_special_stop_strings_map_to_ids_with_the_real_tokenizer(
    tiny_base: tuple[object, object],
) -> None:
    from localsession.runtime.sessions.stops import stop_token_ids

    _, tokenizer = tiny_base
    # one special token each -> its id; plain text and text around a special stay strings
    stops = ["<|im_end|>", "e", "<|endoftext|>", "a<|im_start|>", "<|im_end|>"]
    assert stop_token_ids([7], stops, tokenizer) == (7, 258, 256)
