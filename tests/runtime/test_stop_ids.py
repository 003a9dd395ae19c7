"""The runtime's stop token ids (runtime/sessions/stops.py): checked ids, special stop strings.

Through the fakes' SageMaker-shaped client: a stop string that is one special token cuts a
scripted completion at that token (the string alone could never match: specials decode to
nothing), and ids passed beside the wire request are checked before the op is queued.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from fakes import ByteTokenizer, Completion, FakeServiceClient
from localsession.runtime.errors import ServiceError
from localsession.runtime.sessions.stops import checked_ids, stop_token_ids
from localsession.types import ModelInput, SamplingParams

TOK = ByteTokenizer()


@pytest.mark.parametrize("bad", [-1, 2.0, True, "5", None])
def test_ids_must_be_integers_at_least_zero(bad: object) -> None:
    with pytest.raises(ServiceError, match=f"stop token id {bad!r} must be an integer >= 0"):
        checked_ids([3, bad])
    assert checked_ids([3, 0]) == [3, 0]


def test_special_strings_map_once_and_text_stays_a_string() -> None:
    stops = ["<|endoftext|>", "ab", "<|im_start|>", "x<|im_end|>", "<|endoftext|>"]
    assert stop_token_ids([5, 256], stops, TOK) == (5, 256, 257)
    assert stop_token_ids([], stops, None) == ()  # no model to ask: the strings stay strings


def test_a_special_stop_string_cuts_a_scripted_completion_on_the_sagemaker_surface() -> None:
    with FakeServiceClient(strict=False) as fake:
        fake.script.on_prompt("hi", Completion(tokens=(97, 98, 256, 99, 100)))
        sampler = fake.create_lora_training_client("fakes/bigram", rank=4).create_sampling_client()

        def tokens(stop: list[str]) -> tuple[list[int], str]:
            params = SamplingParams(max_tokens=20, stop=stop)
            (seq,) = (
                sampler.sample(ModelInput.from_ints(TOK.encode("hi")), 1, params)
                .result(timeout=5)
                .sequences
            )
            return list(seq.tokens), seq.stop_reason

        assert tokens(["zz"]) == ([97, 98, 256, 99, 100], "stop")
        assert tokens(["<|endoftext|>"]) == ([97, 98, 256], "stop")
        assert tokens(["c"]) == ([97, 98, 256, 99], "stop")


@pytest.mark.parametrize("bad", ["", "end\ud800"])
def test_a_stop_string_that_is_empty_or_no_unicode_text_is_refused(bad: str) -> None:
    """A lone surrogate (what JSON's "\\ud800" decodes to) is no text a tokenizer encodes: it
    is refused by name before the op is queued, as an empty stop string is."""
    with FakeServiceClient(strict=False) as fake:
        sampler = fake.create_lora_training_client("fakes/bigram", rank=4).create_sampling_client()
        params = SamplingParams(max_tokens=4, stop=["ok", bad])
        with pytest.raises(ClientError, match=r"stop must be a list of non-empty strings") as e:
            sampler.sample(ModelInput.from_ints(TOK.encode("hi")), 1, params).result(timeout=5)
        assert e.value.response["Error"]["Code"] == "ValidationException"
