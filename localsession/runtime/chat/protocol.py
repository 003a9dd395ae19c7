"""OpenAI chat completions over a session's sampler (docs/wire.md#7).

The runtime's ``SampleTrainingSession`` operations pass chat-completion bodies through to the
model; the server also serves them as ``/v1/chat/completions``. This module is the protocol:
:func:`parse_request` checks an OpenAI request and names the field at fault, and
:func:`completion` / :func:`chunks` build OpenAI's response and stream shapes from a
``sample`` result. The sampling itself is the runtime's (``Service.chat_completion``): the
same scheduler, batching and token accounting as ``sample``.

Tool calling: ``tools`` (function signatures) go to the model's chat template, which renders
them its own way (the built-in models use the Qwen format: a ``<tools>`` block in the system
turn). An assistant message's ``tool_calls`` and ``tool`` messages are rendered by the template
too. A reply's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the Qwen
and SmolLM convention) come back as OpenAI ``tool_calls`` with ``finish_reason
"tool_calls"``; the text outside them stays ``content``. ``tool_choice`` may be ``"auto"`` or
``"none"`` (then the tools are not shown to the model); forcing a call is refused, since
sampling cannot force one.

Local decisions: the ``logprob`` of each chosen token is the sampler's (tempered, as for
``sample``); ``top_logprobs`` are at T = 1 (the prompt-logprob convention of
docs/semantics.md#3), so at the default temperature the two agree. Streams are sent token by
token as decoded (``runtime/chat/streaming.py``); :func:`chunks` serves the one case that needs
the whole completion first (``top_logprobs``).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from localsession import vocab
from localsession.port import SampleRequest, TokenCallback
from localsession.runtime import errors
from localsession.runtime.chat.tools import parse_tool_calls, parse_tools, split_tool_calls

#: Request fields served; anything else (response_format, ...) is refused by name.
SUPPORTED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "stream",
        "stream_options",
        "logprobs",
        "top_logprobs",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    }
)
ROLES = frozenset({"system", "user", "assistant", "developer", "tool"})
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat-completion request."""

    model: str | None
    messages: list[dict[str, Any]]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    n: int
    stream: bool
    include_usage: bool
    logprobs: bool
    top_logprobs: int
    #: Function signatures for the chat template (None: no tools offered).
    tools: list[dict[str, Any]] | None = None


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise errors.validation(f"'{key}' must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _int(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if type(value) is not int or not lo <= value <= hi:
        raise errors.validation(f"'{key}' must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts joined."""
    if isinstance(value, list):  # [{"type": "text", "text": ...}, ...]
        parts = [p.get("text") for p in value if isinstance(p, dict)]
        if len(parts) != len(value) or not all(isinstance(p, str) for p in parts):
            raise errors.validation(
                f"{where}: only text parts ({{'type': 'text', 'text': ...}}) are supported"
            )
        return "".join(str(p) for p in parts)
    if not isinstance(value, str):
        raise errors.validation(f"{where} must be a string")
    return value


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise errors.validation("'messages' must be a non-empty list of {role, content}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise errors.validation(f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}")
        role = str(message["role"])
        allowed = {"role", "content", "name"}
        allowed |= {"tool_calls"} if role == "assistant" else set()
        allowed |= {"tool_call_id"} if role == "tool" else set()
        unknown = set(message) - allowed
        if unknown:
            raise errors.validation(
                f"messages[{i}] ({role}) has unsupported field(s) {', '.join(sorted(unknown))}"
            )
        checked: dict[str, Any] = {"role": role}
        calls = message.get("tool_calls")
        if calls is not None:
            checked["tool_calls"] = parse_tool_calls(calls, f"messages[{i}].tool_calls")
        content = message.get("content")
        if content is None and calls:
            checked["content"] = ""
        else:
            checked["content"] = _text(content, f"messages[{i}].content")
        if role == "tool" and "tool_call_id" in message:
            checked["tool_call_id"] = message["tool_call_id"]
        messages.append(checked)
    return messages


def parse_request(body: dict[str, Any]) -> ChatRequest:
    """Check an OpenAI chat-completions request; ValidationException naming the field."""
    unsupported = sorted(set(body) - SUPPORTED)
    if unsupported:
        raise errors.validation(
            f"unsupported field(s) {', '.join(unsupported)}: localsession serves "
            f"{', '.join(sorted(SUPPORTED))}"
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise errors.validation("'model' must be a string: a session name or model-package ARN")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    checked_max = _int({"max_tokens": max_tokens}, "max_tokens", DEFAULT_MAX_TOKENS, 1, 131072)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    valid_stop = isinstance(stop, list) and len(stop) <= 4
    if stop is not None and not (valid_stop and all(isinstance(s, str) and s for s in stop)):
        raise errors.validation("'stop' must be a string or a list of up to 4 non-empty strings")
    for key in ("stream", "logprobs"):
        if not isinstance(body.get(key, False), bool):
            raise errors.validation(f"'{key}' must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise errors.validation("'stream_options' supports only {'include_usage': bool}")
    top = _int(body, "top_logprobs", 0, 0, 20) or 0
    if top and not body.get("logprobs"):
        raise errors.validation("'top_logprobs' requires 'logprobs': true")
    return ChatRequest(
        model=model,
        messages=_messages(body.get("messages")),
        max_tokens=checked_max or DEFAULT_MAX_TOKENS,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        seed=_int(body, "seed", None, -(2**63), 2**63 - 1),
        stop=tuple(stop or ()),
        n=_int(body, "n", 1, 1, 128) or 1,
        stream=bool(body.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        logprobs=bool(body.get("logprobs", False)),
        top_logprobs=top,
        tools=parse_tools(body),
    )


@dataclass
class Choice:
    """One generated sequence, decoded, with what the response needs."""

    text: str
    finish_reason: str
    tokens: list[int]
    logprobs: list[float]
    top: list[list[tuple[str, float]]] | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def _message(choice: Choice) -> dict[str, Any]:
    """The assistant message of a choice: content, plus ``tool_calls`` when it made any."""
    if not choice.tool_calls:
        return {"role": "assistant", "content": choice.text}
    return {"role": "assistant", "content": choice.text or None, "tool_calls": choice.tool_calls}


def _token_logprobs(
    choice: Choice, decode: Any, top_logprobs: int
) -> dict[str, list[dict[str, Any]]]:
    content = []
    for i, (token, logprob) in enumerate(zip(choice.tokens, choice.logprobs, strict=True)):
        text = decode([token])
        alternatives = (choice.top[i] if choice.top else [])[:top_logprobs]
        content.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in alternatives
                ],
            }
        )
    return {"content": content}


def completion(
    request: ChatRequest,
    model: str,
    choices: list[Choice],
    prompt_tokens: int,
    decode: Any,
) -> dict[str, Any]:
    """The ``chat.completion`` body. With ``tools`` offered, each reply's ``<tool_call>``
    blocks become ``tool_calls`` (:func:`split_tool_calls`)."""
    if request.tools:
        for c in choices:
            c.text, c.tool_calls = split_tool_calls(c.text)
            if c.tool_calls and c.finish_reason == "stop":
                c.finish_reason = "tool_calls"
    completion_tokens = sum(len(c.tokens) for c in choices)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "localsession",
        "choices": [
            {
                "index": i,
                "message": _message(c),
                "finish_reason": c.finish_reason,
                "logprobs": _token_logprobs(c, decode, request.top_logprobs)
                if request.logprobs
                else None,
            }
            for i, c in enumerate(choices)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def chunks(body: dict[str, Any], request: ChatRequest) -> list[dict[str, Any]]:
    """A completion as ``chat.completion.chunk`` events: the role, the content, the finish
    reason per choice, then usage when ``stream_options.include_usage`` asked for it."""
    base = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    events: list[dict[str, Any]] = []
    for choice in body["choices"]:
        index = choice["index"]
        message = choice["message"]
        first = {"index": index, "delta": {"role": "assistant", "content": ""}}
        events.append({**base, "choices": [{**first, "logprobs": None, "finish_reason": None}]})
        delta: dict[str, Any] = {"content": message["content"]}
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {"index": j, **call} for j, call in enumerate(message["tool_calls"])
            ]
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": index,
                        "delta": delta,
                        "logprobs": choice["logprobs"],
                        "finish_reason": None,
                    }
                ],
            }
        )
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": index,
                        "delta": {},
                        "logprobs": None,
                        "finish_reason": choice["finish_reason"],
                    }
                ],
            }
        )
    if request.include_usage:
        events.append({**base, "choices": [], "usage": body["usage"]})
    return events


def sample_request(
    request: ChatRequest,
    prompt: list[int],
    on_token: TokenCallback | None = None,
    stop_token_ids: tuple[int, ...] = (),
) -> SampleRequest:
    """The sampling request of a chat request: its ``n``, limits and stops (``stop_token_ids``:
    the special stop strings' ids), and its seed, or a fresh one (``on_token`` streams each
    decoded token)."""
    seed = random.SystemRandom().randrange(2**31) if request.seed is None else request.seed
    return SampleRequest(
        prompt=prompt,
        num_samples=request.n,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=seed,
        stop=request.stop,
        stop_token_ids=stop_token_ids,
        on_token=on_token,
    )


def openai_error(exc: errors.ServiceError) -> dict[str, Any]:
    """OpenAI's error body for a service refusal."""
    kinds: dict[str, str] = {
        vocab.ErrorCode.VALIDATION: "invalid_request_error",
        vocab.ErrorCode.NOT_FOUND: "not_found_error",
        vocab.ErrorCode.CP_NOT_FOUND: "not_found_error",
        vocab.ErrorCode.CONFLICT: "conflict_error",
        vocab.ErrorCode.THROTTLING: "rate_limit_error",
    }
    return {
        "error": {
            "message": exc.message,
            "type": kinds.get(exc.code, "server_error"),
            "param": None,
            "code": exc.code,
        }
    }
