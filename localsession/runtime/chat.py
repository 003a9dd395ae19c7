"""OpenAI chat completions over a session's sampler (sagemaker-sdk.md §9.5).

The runtime's ``SampleTrainingSession`` operations pass chat-completion bodies through to the
model; the server also serves them as ``/v1/chat/completions``. This module is the protocol:
:func:`parse_request` checks an OpenAI request and names the field at fault, and
:func:`completion` / :func:`chunks` build OpenAI's response and stream shapes from a
``sample`` result. The sampling itself is the runtime's (``Service.chat_completion``): the
same scheduler, batching and token accounting as ``sample``.

Local decisions: the ``logprob`` of each chosen token is the sampler's (tempered, as for
``sample``); ``top_logprobs`` are at T = 1 (the prompt-logprob convention of
local-semantics §3), so at the default temperature the two agree. Streams are sent token by
token as decoded (``runtime/streaming.py``); :func:`chunks` serves the one case that needs
the whole completion first (``top_logprobs``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from localsession.runtime import errors

#: Request fields served; anything else (tools, response_format, ...) is refused by name.
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
    }
)
ROLES = frozenset({"system", "user", "assistant", "developer"})
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat-completion request."""

    model: str | None
    messages: list[dict[str, str]]
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


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise errors.validation("'messages' must be a non-empty list of {role, content}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise errors.validation(
                f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}"
            )
        content = message.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            parts = [p.get("text") for p in content if isinstance(p, dict)]
            if len(parts) != len(content) or not all(isinstance(p, str) for p in parts):
                raise errors.validation(
                    f"messages[{i}].content: only text parts ({{'type': 'text', 'text': ...}}) "
                    "are supported"
                )
            content = "".join(str(p) for p in parts)
        if not isinstance(content, str):
            raise errors.validation(f"messages[{i}].content must be a string")
        unknown = set(message) - {"role", "content", "name"}
        if unknown:
            raise errors.validation(
                f"messages[{i}] has unsupported field(s) {', '.join(sorted(unknown))}; "
                "tool calls are not served locally"
            )
        messages.append({"role": str(message["role"]), "content": content})
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
    )


@dataclass
class Choice:
    """One generated sequence, decoded, with what the response needs."""

    text: str
    finish_reason: str
    tokens: list[int]
    logprobs: list[float]
    top: list[list[tuple[str, float]]] | None


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
    """The ``chat.completion`` body."""
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
                "message": {"role": "assistant", "content": c.text},
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
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": index,
                        "delta": {"content": message["content"]},
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


def openai_error(exc: errors.ServiceError) -> dict[str, Any]:
    """OpenAI's error body for a service refusal."""
    kinds = {
        "ValidationException": "invalid_request_error",
        "ResourceNotFoundException": "not_found_error",
        "ResourceNotFound": "not_found_error",
        "ConflictException": "conflict_error",
        "ThrottlingException": "rate_limit_error",
    }
    return {
        "error": {
            "message": exc.message,
            "type": kinds.get(exc.code, "server_error"),
            "param": None,
            "code": exc.code,
        }
    }
