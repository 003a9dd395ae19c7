"""Stop token ids through the unmodified ``tinker`` SDK: generation ends at the id.

On the torch engine (the built-in tiny model) a greedy request with ``max_tokens=64`` and a
stop id first drawn at step k returns k tokens, and the decoder ran exactly k steps (counted
with the sampler's step hook, in this process: the fixture's server is a thread here); the
tokens are the prefix of an independent run without stops. On the fake engine, a scripted
completion shows the ids and a stop string that is one special token cutting the same way,
and an id outside the vocabulary is refused with a message naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types


@pytest.fixture
def sc(localsession_tinker: Any) -> Iterator[Any]:
    client = tinker.ServiceClient()
    yield client
    client.close("success").result()


def test_a_stop_id_ends_generation_at_that_step(sc: Any, decode_steps: list[int]) -> None:
    sampler = sc.create_sampling_client(base_model="localsession/tiny").result()
    prompt = types.ModelInput.from_ints([257, *b"Once upon a time"])

    def greedy(stop: Any = None) -> Any:
        params = types.SamplingParams(max_tokens=64, temperature=0.0, stop=stop)
        return sampler.sample(prompt, num_samples=1, sampling_params=params).result().sequences[0]

    free = greedy()
    assert (len(free.tokens), free.stop_reason) == (64, "length")
    assert decode_steps == [64]
    k = next(i for i in range(6, 64) if free.tokens[i] not in free.tokens[:i])
    cut = greedy(stop=[free.tokens[k]])
    assert cut.tokens == free.tokens[: k + 1] and cut.stop_reason == "stop"
    assert decode_steps == [64, k + 1]  # k + 1 tokens, k + 1 decode steps: nothing ran past the id


@pytest.mark.localsession_tinker(engine="fake")
def test_ids_and_special_stop_strings_cut_a_scripted_completion(
    localsession_tinker: Any, sc: Any
) -> None:
    from fakes import Completion

    prompt = [257, *b"hi"]
    localsession_tinker.service.script.on_prompt(prompt, Completion(tokens=(97, 98, 256, 99, 100)))
    sampler = sc.create_sampling_client(base_model="localsession/tiny").result()

    def tokens(stop: Any) -> tuple[list[int], str]:
        params = types.SamplingParams(max_tokens=20, stop=stop)
        ask = sampler.sample(types.ModelInput.from_ints(prompt), 1, params)
        seq = ask.result().sequences[0]
        return seq.tokens, seq.stop_reason

    assert tokens(None) == ([97, 98, 256, 99, 100], "stop")  # the script's own ending
    assert tokens([99]) == ([97, 98, 256, 99], "stop")
    assert tokens([100, 98]) == ([97, 98], "stop")
    # "<|endoftext|>" is token 256 alone and decodes to nothing: it stops at that id
    assert tokens("<|endoftext|>") == ([97, 98, 256], "stop")
    assert tokens(["zz", "<|endoftext|>"]) == ([97, 98, 256], "stop")
    with pytest.raises(tinker.RequestFailedError, match="stop token id 300 is outside"):
        tokens([300])
