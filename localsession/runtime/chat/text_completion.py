"""OpenAI's legacy text completions (``POST /completions``) over the chat machinery.

A text completion is a chat completion whose prompt is the request's text, tokenized as is
(no chat template), so it shares everything else with chat: the checks of the sampling
fields (:func:`protocol.parse_request`), the scheduler, stop handling, logprobs, streaming.
:func:`parse_request` turns a completions body into a :class:`protocol.ChatRequest` and the
prompt; :func:`completion` and :func:`chunk` turn chat's answers into the
``text_completion`` shapes.

Served: ``prompt`` (a string, a list of token ids, or a one-element list of either),
``max_tokens`` (default 16, OpenAI's), ``temperature``, ``top_p``, ``n``, ``seed``, ``stop``,
``stream`` (+ ``stream_options.include_usage``), ``logprobs`` (0-5: the sampled tokens'
logprobs and that many alternatives per position), ``echo: false``, ``user``. Several prompts
in one request, ``echo: true``, ``suffix``, ``best_of`` and penalties are refused by name.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from localsession.runtime import errors
from localsession.runtime.chat import protocol

#: OpenAI's default ``max_tokens`` for text completions.
DEFAULT_MAX_TOKENS = 16
#: Request fields served (the sampling ones are checked as chat checks them).
SUPPORTED = frozenset(
    {
        "model",
        "prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "stream",
        "stream_options",
        "logprobs",
        "echo",
        "user",
    }
)
#: The most alternatives ``logprobs`` may ask per position (OpenAI's limit).
MAX_LOGPROBS = 5


def _prompt(value: Any) -> str | list[int]:
    """The one prompt of a request: text, or token ids."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(type(t) is int and t >= 0 for t in value):
        return list(value)
    raise errors.validation(
        "'prompt' must be one non-empty string or one non-empty list of token ids "
        "(several prompts per request are not served: send one request per prompt)"
    )


def parse_request(body: dict[str, Any]) -> tuple[protocol.ChatRequest, str | list[int]]:
    """Check a completions body; the chat request that samples it, and its prompt."""
    unsupported = sorted(set(body) - SUPPORTED)
    if unsupported:
        raise errors.validation(
            f"unsupported field(s) {', '.join(unsupported)}: /completions serves "
            f"{', '.join(sorted(SUPPORTED))}"
        )
    if body.get("echo", False) is not False:
        raise errors.validation("'echo' must be false: the prompt is not repeated in the text")
    logprobs = body.get("logprobs")
    if logprobs is not None and (type(logprobs) is not int or not 0 <= logprobs <= MAX_LOGPROBS):
        raise errors.validation(
            f"'logprobs' must be an integer in [0, {MAX_LOGPROBS}] or null, got {logprobs!r}"
        )
    chat = {k: v for k, v in body.items() if k not in ("prompt", "echo", "logprobs")}
    chat["messages"] = [{"role": "user", "content": "-"}]  # checked, then dropped
    chat.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    if logprobs is not None:
        chat["logprobs"] = True
        chat["top_logprobs"] = logprobs
    request = protocol.parse_request(chat)
    return dataclasses.replace(request, messages=[]), _prompt(body.get("prompt"))


def _logprobs(chat_logprobs: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat's per-token logprobs in the completions shape (tokens, their logprobs, the top
    alternatives per position, each token's offset in the text)."""
    if chat_logprobs is None:
        return None
    content = chat_logprobs.get("content") or []
    offsets, at = [], 0
    for item in content:
        offsets.append(at)
        at += len(item["token"])
    return {
        "tokens": [item["token"] for item in content],
        "token_logprobs": [item["logprob"] for item in content],
        "top_logprobs": [
            {alt["token"]: alt["logprob"] for alt in item.get("top_logprobs") or []}
            for item in content
        ],
        "text_offset": offsets,
    }


def completion(chat_body: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` body as the ``text_completion`` body of the same sample."""
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": chat_body["created"],
        "model": chat_body["model"],
        "system_fingerprint": chat_body.get("system_fingerprint"),
        "choices": [
            {
                "index": c["index"],
                "text": c["message"]["content"] or "",
                "logprobs": _logprobs(c.get("logprobs")),
                "finish_reason": c["finish_reason"],
            }
            for c in chat_body["choices"]
        ],
        "usage": chat_body["usage"],
    }


def chunk(chat_chunk: dict[str, Any], stream_id: str) -> dict[str, Any] | None:
    """A ``chat.completion.chunk`` as a streamed ``text_completion`` event, or None when it
    carries nothing a completions client reads (the role announcement)."""
    out = {
        "id": stream_id,
        "object": "text_completion",
        "created": chat_chunk["created"],
        "model": chat_chunk["model"],
        "system_fingerprint": chat_chunk.get("system_fingerprint"),
    }
    if "usage" in chat_chunk:
        return {**out, "choices": [], "usage": chat_chunk["usage"]}
    choices = []
    for c in chat_chunk["choices"]:
        text = (c.get("delta") or {}).get("content") or ""
        logprobs = _logprobs(c.get("logprobs"))
        if not text and logprobs is None and c.get("finish_reason") is None:
            continue
        choices.append(
            {
                "index": c["index"],
                "text": text,
                "logprobs": logprobs,
                "finish_reason": c.get("finish_reason"),
            }
        )
    return {**out, "choices": choices} if choices else None
