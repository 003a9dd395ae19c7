"""The built-in tiny models: sizes, seeded weights and the byte-level tokenizer."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from localsession.engine.builtin import (
    BOS_ID,
    EOS_ID,
    INIT_STD,
    PAD_ID,
    build_builtin,
    build_tokenizer,
    describe_builtin,
)

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer()


def test_tokenizer_ids_are_bytes(tok: Any) -> None:
    assert len(tok) == 259
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)
    text = "héllo 🎉\n"
    assert tok.encode(text) == [BOS_ID, *text.encode("utf-8")]
    assert tok.encode(text, add_special_tokens=False) == list(text.encode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(st.text().filter(lambda s: not any(sp in s for sp in SPECIALS)))
def test_tokenizer_round_trip(tok: Any, text: str) -> None:
    ids = tok.encode(text)
    assert ids[0] == BOS_ID
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_chat_template_is_the_qwen_format(tok: Any) -> None:
    messages = [{"role": "user", "content": "2+2?"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids == [BOS_ID, *b"user\n2+2?", EOS_ID, 10, BOS_ID, *b"assistant\n"]
    no_prompt = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert no_prompt == "<|im_start|>user\n2+2?<|im_end|>\n"
    system = [{"role": "system", "content": "Be brief."}, *messages]
    assert tok.apply_chat_template(system, tokenize=False).startswith(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
    )


def test_special_tokens_never_reach_the_text(tok: Any) -> None:
    reply = tok.encode("4", add_special_tokens=False) + [EOS_ID]
    assert tok.decode(reply, skip_special_tokens=True) == "4"
    assert tok.convert_ids_to_tokens([PAD_ID, BOS_ID, EOS_ID]) == list(SPECIALS)


@pytest.mark.parametrize(
    ("name", "hidden", "layers", "heads", "kv_heads", "params"),
    [
        # embed + head: 2*259*h; per layer: attention + 3*h*i MLP + 2 norms; final norm
        (
            "localsession/tiny",
            128,
            2,
            4,
            4,
            2 * 259 * 128 + 2 * (4 * 128 * 128 + 3 * 128 * 512 + 2 * 128) + 128,
        ),
        (
            "localsession/small",
            256,
            4,
            8,
            4,
            2 * 259 * 256 + 4 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 1024 + 2 * 256) + 256,
        ),
    ],
)
def test_builtin_shapes(
    name: str, hidden: int, layers: int, heads: int, kv_heads: int, params: int
) -> None:
    model: Any = build_builtin(name)[0]
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers) == (hidden, layers)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (heads, kv_heads)
    assert cfg.vocab_size == 259 and cfg.max_position_embeddings == 131072  # a stand-in's
    assert cfg.tie_word_embeddings is False
    assert model.get_input_embeddings().weight.data_ptr() != model.lm_head.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == params
    assert describe_builtin(name)["parameters"] == params


def test_weights_follow_the_documented_seeded_recipe(tiny_base: tuple[Any, Any]) -> None:
    # Independent re-derivation: generator seeded with crc32(name), parameters in sorted-name
    # order, vectors = 1, the embedding ~ N(0, INIT_STD), other matrices ~ N(0, 1/fan_in).
    model, _ = tiny_base
    gen = torch.Generator().manual_seed(zlib.crc32(b"localsession/tiny"))
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        if param.dim() == 1:
            expected = torch.ones(param.shape)
        else:
            std = INIT_STD if name == "model.embed_tokens.weight" else 1 / math.sqrt(param.shape[1])
            expected = torch.empty(param.shape).normal_(0.0, std, generator=gen)
        assert torch.equal(param.detach(), expected)


def test_weights_do_not_depend_on_global_rng() -> None:
    torch.manual_seed(1)
    first, _ = build_builtin("localsession/tiny")
    torch.manual_seed(2)
    state = torch.random.get_rng_state()
    second, _ = build_builtin("localsession/tiny")
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    for (n1, p1), (n2, p2) in zip(first.named_parameters(), second.named_parameters(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)


def test_chat_template_renders_tools_and_tool_calls_in_the_qwen_format(tok: Any) -> None:
    from localsession.runtime.chat.tools import split_tool_calls

    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
        },
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5."},
    ]
    text = tok.apply_chat_template(conversation, tools=[tool], tokenize=False)
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "add", "parameters": ' in text
    assert text.endswith(
        "\n</tools>\n\nTo call one, reply with a JSON object holding the function name and its "
        "arguments inside <tool_call></tool_call> tags, one block per call:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n2+3?<|im_end|>\n"
        f"<|im_start|>assistant\n{call}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n5.<|im_end|>\n"
    )
    # What the template writes for a call is what the chat layer reads back as one.
    assistant_turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    content, calls = split_tool_calls(assistant_turn)
    assert content == "" and len(calls) == 1
    assert calls[0]["function"]["name"] == "add"
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 2, "b": 3}
    # Arguments given as a JSON string (as OpenAI clients send them) render the same way.
    as_string = [
        {**m, "tool_calls": [{"function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]}
        if m.get("tool_calls")
        else m
        for m in conversation
    ]
    assert tok.apply_chat_template(as_string, tools=[tool], tokenize=False) == text


def test_torch_free_export_writes_what_save_pretrained_writes(tmp_path: Path) -> None:
    """``builtin_files.write_files`` (no torch, no transformers: what the fake engine's Hub
    uses) against transformers' own ``save_pretrained`` of the same tokenizer and config."""
    from localsession.engine.builtin import builtin_config
    from localsession.engine.builtin_files import write_files

    for name in ("localsession/tiny", "localsession/small", "localsession/tiny-think"):
        ours, theirs = tmp_path / name / "ours", tmp_path / name / "theirs"
        write_files(name, ours)
        builtin_config(name).save_pretrained(str(theirs))
        build_tokenizer(name).save_pretrained(str(theirs))
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        for file in ("tokenizer.json", "tokenizer_config.json", "config.json"):
            mine, reference = (json.loads((d / file).read_text()) for d in (ours, theirs))
            reference.pop("transformers_version", None)
            assert mine == reference, file
        template = (ours / "chat_template.jinja").read_text()
        assert template == (theirs / "chat_template.jinja").read_text()
        loaded = AutoTokenizer.from_pretrained(str(ours))
        text = "héllo <|im_end|> <think>wörld</think>"
        assert loaded.encode(text) == build_tokenizer(name).encode(text)


def test_only_tiny_think_has_the_think_tokens() -> None:
    """The think tokens are ids 259 and 260 of ``localsession/tiny-think`` alone; tiny and
    small keep their 259-id vocabulary, where ``<think>`` is seven bytes."""
    from localsession.engine.builtin import builtin_config

    think = build_tokenizer("Qwen/Qwen3.5-4B", "localsession/tiny-think")  # a mapped name
    assert think.encode("<think>x</think>", add_special_tokens=False) == [259, 120, 260]
    assert think.decode([259, 120, 260], skip_special_tokens=True) == "<think>x</think>"
    assert builtin_config("localsession/tiny-think").vocab_size == 261
    for name in ("localsession/tiny", "localsession/small"):
        tok = build_tokenizer(name)
        assert len(tok) == 259 and builtin_config(name).vocab_size == 259
        assert tok.encode("<think>", add_special_tokens=False) == list(b"<think>")
    plain = build_tokenizer("localsession/tiny")
    text = "héllo <|im_start|>wörld<|im_end|>"
    assert think.encode(text) == plain.encode(text)  # the same ids everywhere else
