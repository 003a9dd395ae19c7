"""The fakes' pure-Python ``ByteTokenizer`` against the built-in models' real tokenizer.

The truth here is independent of the fake: ``localsession.engine.builtin.build_tokenizer``
(a ``tokenizers`` BPE wrapped in ``transformers``' ``PreTrainedTokenizerFast``, rendering its
chat template through ``transformers``). The fake must give the same ids, text, token strings
and chat renderings, special tokens included, so a loop unit-tested on the fakes reads the same
text it will read from a real session.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import ByteTokenizer, FakeServiceClient
from localsession.chat_format import BOS_TOKEN, EOS_TOKEN, PAD_ID, PAD_TOKEN
from localsession.types import ModelInput, SamplingParams

FAKE = ByteTokenizer()
SPECIALS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)


@pytest.fixture(scope="module")
def real() -> Any:
    from localsession.engine.builtin import build_tokenizer

    return build_tokenizer("localsession/tiny")


def _ids(encoded: Any) -> list[int]:
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def test_special_tokens_and_sizes_match(real: Any) -> None:
    for attr in (
        "pad_token",
        "bos_token",
        "eos_token",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "vocab_size",
        "all_special_ids",
        "all_special_tokens",
    ):
        assert getattr(FAKE, attr) == getattr(real, attr), attr
    assert len(FAKE) == len(real) == 259
    assert FAKE.chat_template == real.chat_template


# Text that spells special tokens, and byte ids that split multi-byte characters.
TEXT = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(SPECIALS)), max_size=6).map("".join)
IDS = st.lists(st.one_of(st.integers(0, 258), st.sampled_from([0xC3, 0xA9, 0xE2, 32])), max_size=24)


@settings(max_examples=80, deadline=None)
@given(TEXT, st.booleans())
def test_encode_matches(real: Any, text: str, add_special_tokens: bool) -> None:
    kwargs = {"add_special_tokens": add_special_tokens}
    assert FAKE.encode(text, **kwargs) == real.encode(text, **kwargs)
    assert FAKE(text, **kwargs)["input_ids"] == real(text, **kwargs)["input_ids"]


@settings(max_examples=80, deadline=None)
@given(IDS, st.booleans())
def test_decode_matches(real: Any, ids: list[int], skip: bool) -> None:
    assert FAKE.decode(ids, skip_special_tokens=skip) == real.decode(ids, skip_special_tokens=skip)
    assert FAKE.convert_ids_to_tokens(ids) == real.convert_ids_to_tokens(ids)


TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": 'a + b <fast> & "exact" ünïcode',
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ],
    [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+3? é"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
                {"function": {"name": "add", "arguments": '{"a": 1}'}},
            ],
        },
        {"role": "tool", "content": "5"},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": "5 <|im_end|> and 1"},
    ],
]


@pytest.mark.parametrize("tools", [None, [TOOL]])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_chat_template_matches(
    real: Any, conversation: list[dict[str, Any]], tools: Any, add_generation_prompt: bool
) -> None:
    kwargs: dict[str, Any] = {"tools": tools, "add_generation_prompt": add_generation_prompt}
    text = FAKE.apply_chat_template(conversation, tokenize=False, **kwargs)
    assert text == real.apply_chat_template(conversation, tokenize=False, **kwargs)
    encoded = FAKE.apply_chat_template(conversation, **kwargs)
    assert encoded["input_ids"] == _ids(real.apply_chat_template(conversation, **kwargs))
    assert encoded["attention_mask"] == [1] * len(encoded["input_ids"])
    listed = FAKE.apply_chat_template(conversation, return_dict=False, **kwargs)
    assert listed == real.apply_chat_template(conversation, return_dict=False, **kwargs)


def test_chat_template_writes_json_as_transformers_does() -> None:
    text = FAKE.apply_chat_template(
        [{"role": "user", "content": "x"}], tools=[TOOL], tokenize=False
    )
    assert json.dumps(TOOL, ensure_ascii=False) in text  # no HTML escaping, keys unsorted


def test_a_scripted_completion_decodes_as_a_real_one(real: Any) -> None:
    """Issue 21: the text of a scripted completion carries the built-in models' EOS, and no
    special token at all with ``skip_special_tokens=True`` (what the chat layer uses)."""
    with FakeServiceClient(strict=False) as fake:
        fake.script.on_prompt("2+3=", "5")
        sampler = fake.create_lora_training_client("fakes/bigram", rank=4).create_sampling_client()
        tok = sampler.get_tokenizer()
        prompt = ModelInput.from_ints(tok.encode("2+3="))
        out = sampler.sample(prompt, 1, SamplingParams(max_tokens=8)).result(timeout=5)
    tokens = list(out.sequences[0].tokens)
    assert tokens == [ord("5"), real.eos_token_id]
    assert tok.decode(tokens) == real.decode(tokens) == "5<|im_end|>"
    assert tok.decode(tokens, skip_special_tokens=True) == "5"
    assert "<eos>" not in tok.decode(tokens)


@pytest.mark.parametrize("numerics", [False, True])
def test_a_sampled_special_token_never_completes_a_stop_string(numerics: bool) -> None:
    """``<|endoftext|>`` contains an "e"; the fakes, like the torch engine, match stop strings
    in the text with special tokens skipped, so only a real "e" stops the stream."""
    with FakeServiceClient(strict=False, numerics=numerics) as fake:
        fake.script.on_prompt("go", [PAD_ID, *b"xyz", *b"e", *b"tail"])
        sampler = fake.create_lora_training_client("fakes/bigram", rank=4).create_sampling_client()
        prompt = ModelInput.from_ints(FAKE.encode("go"))
        params = SamplingParams(max_tokens=32, stop=["e"])
        (seq,) = sampler.sample(prompt, 1, params).result(timeout=5).sequences
    assert list(seq.tokens) == [PAD_ID, *b"xyze"]
    assert seq.stop_reason == "stop"
