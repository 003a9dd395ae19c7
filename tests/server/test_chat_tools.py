"""Tool calling through ``/v1/chat/completions`` with the real ``openai`` client.

The session's engine is scripted (its replies are fixed token lists) but its tokenizer is the
built-in model's real one, so this checks the protocol layer exactly: ``tools`` reach the
model as the chat template renders them (the engine records the prompt it was given), a
reply's ``<tool_call>`` block comes back as OpenAI ``tool_calls``, the tool's answer is
rendered back into the next prompt, and special tokens never reach the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from localsession import ServiceClient as LocalServiceClient
from localsession.engine.builtin import build_tokenizer
from localsession.port import EngineSpec, SampleRequest
from localsession.port_results import SampledSequence, SampleResult
from localsession.runtime.models.catalog import StaticCatalog
from localsession.runtime.service import ServiceConfig
from localsession.server.hosting import ServerThread
from localsession.wiring import build_service

from .common import ROLE

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
ASK = [{"role": "user", "content": "2+3?"}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
TOKENIZER = build_tokenizer("localsession/tiny")


class ScriptedEngine:
    """Replies with the next scripted text (then EOS); records every prompt."""

    def __init__(self, replies: list[str], prompts: list[list[int]]) -> None:
        self.replies, self.prompts = replies, prompts

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        out = []
        for request in requests:
            self.prompts.append(list(request.prompt))
            tokens = TOKENIZER.encode(self.replies.pop(0), add_special_tokens=False)
            tokens.append(TOKENIZER.eos_token_id)
            sequence = SampledSequence(tokens, [-0.5] * len(tokens), "stop")
            out.append(SampleResult([sequence] * request.num_samples))
        return out

    def get_tokenizer(self) -> Any:
        return TOKENIZER

    def close(self) -> None:
        pass


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[Any, str, list[str], list[list[int]]]]:
    """(openai client, session name, replies to script, prompts the engine saw)."""
    replies: list[str] = []
    prompts: list[list[int]] = []

    def factory(spec: EngineSpec) -> Any:
        return ScriptedEngine(replies, prompts)

    service = build_service(
        ServiceConfig(home=tmp_path, engine_factory=factory),
        catalog=StaticCatalog(["localsession/tiny"]),
    )
    with ServerThread(service, long_poll=5.0) as url:
        local = LocalServiceClient(role_arn=ROLE, backend=service)
        tc = local.create_lora_training_client("localsession/tiny", rank=4)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        yield client, tc.training_session_name, replies, prompts
    service.close()


def _rendered(messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    encoded = TOKENIZER.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True
    )
    return list(encoded["input_ids"] if "input_ids" in encoded else encoded)


def test_a_tool_call_comes_back_as_tool_calls(chat: Any) -> None:
    client, session, replies, prompts = chat
    replies.append(CALL)
    response = client.chat.completions.create(model=session, messages=ASK, tools=TOOLS)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    # The model saw the template's rendering with the tools, a system turn listing them.
    assert prompts == [_rendered(ASK, TOOLS)]
    text = TOKENIZER.decode(prompts[0])
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert json.dumps(TOOLS[0]) in text and text.endswith("<|im_start|>assistant\n")


def test_text_around_calls_stays_content_and_bad_blocks_stay_text(chat: Any) -> None:
    client, session, replies, _ = chat
    replies.append("Let me add.\n" + CALL + "\n" + CALL.replace("add", "mul"))
    choice = client.chat.completions.create(model=session, messages=ASK, tools=TOOLS).choices[0]
    assert choice.message.content == "Let me add."
    assert [c.function.name for c in choice.message.tool_calls] == ["add", "mul"]
    replies.append("<tool_call>\nnot json\n</tool_call>")
    choice = client.chat.completions.create(model=session, messages=ASK, tools=TOOLS).choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == "<tool_call>\nnot json\n</tool_call>"


def test_the_tool_result_goes_back_through_the_template(chat: Any) -> None:
    client, session, replies, prompts = chat
    replies += [CALL, "It is 5."]
    call = client.chat.completions.create(model=session, messages=ASK, tools=TOOLS)
    call_id = call.choices[0].message.tool_calls[0].id
    conversation = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "5"},
    ]
    answer = client.chat.completions.create(model=session, messages=conversation, tools=TOOLS)
    assert answer.choices[0].message.content == "It is 5."
    assert answer.choices[0].finish_reason == "stop"
    expected_tail = (
        "<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n" + CALL + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert TOKENIZER.decode(prompts[1]).endswith(expected_tail)
    assert answer.usage.prompt_tokens == len(prompts[1])


def test_streamed_tool_calls(chat: Any) -> None:
    client, session, replies, _ = chat
    replies.append(CALL)
    chunks = list(
        client.chat.completions.create(model=session, messages=ASK, tools=TOOLS, stream=True)
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [call for d in deltas for call in (d.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "add"
    assert json.loads(calls[0].function.arguments or "") == {"a": 2, "b": 3}
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["tool_calls"]


def test_tool_choice_none_hides_the_tools(chat: Any) -> None:
    client, session, replies, prompts = chat
    replies.append("Five.")
    choice = client.chat.completions.create(
        model=session, messages=ASK, tools=TOOLS, tool_choice="none"
    ).choices[0]
    assert choice.message.content == "Five." and choice.message.tool_calls is None
    assert prompts == [_rendered(ASK)]
    assert "<|im_end|>" not in TOKENIZER.decode(prompts[0])[-25:]


def test_forcing_a_call_or_a_malformed_tool_is_refused_by_name(chat: Any) -> None:
    client, session, _, prompts = chat
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=session, messages=ASK, tools=TOOLS, tool_choice="required"
        )
    assert "tool_choice" in str(refused.value) and "'auto'" in str(refused.value)
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]"):
        client.chat.completions.create(model=session, messages=ASK, tools=[{"type": "function"}])
    bad_args = [
        *ASK,
        {"role": "assistant", "tool_calls": [{"function": {"name": "add", "arguments": "{"}}]},
    ]
    with pytest.raises(openai.BadRequestError, match="not valid JSON"):
        client.chat.completions.create(model=session, messages=bad_args)
    assert prompts == []  # nothing reached the model
