"""Streamed chat completions: tokens go out as the batched decoder picks them.

:func:`stream_chat` submits a prepared chat request to the sampling scheduler with an
``on_token`` callback (localsession.port) and yields OpenAI ``chat.completion.chunk`` bodies while
generation runs: the role first, then one content delta per decoded token (text that is
complete: a token that ends inside a multi-byte character, or text that could still turn out
to be the start of a stop string, is held back until it is settled), then each choice's
finish reason and, when asked, the usage. The request is batched with every other sampling
request exactly as a non-streamed one is.

The final result is authoritative: when generation ends, whatever part of a choice's final
text was not sent yet goes out before its finish chunk (an engine that cannot stream sends
its whole text there). ``top_logprobs`` needs a second scoring pass after generation, so
such a request is answered by the non-incremental path (``chat.chunks``).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from localsession import vocab
from localsession.port import SampleRequest
from localsession.port_results import SampleResult
from localsession.runtime import errors
from localsession.runtime.chat import protocol
from localsession.runtime.sessions.operations import Operation

#: (choice index, token, logprob), or ``None`` once the operation finished
_Event = tuple[int, int, float] | None


class _ChoiceText:
    """One choice's decoded text and how much of it was sent."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...]) -> None:
        self.tokenizer, self.stop = tokenizer, stop
        self.tokens: list[int] = []
        self.sent = ""
        self.hold = max((len(s) for s in stop), default=1) - 1

    def settled(self) -> str:
        """The text that can no longer change (stop cut applied, tail held back)."""
        text = str(self.tokenizer.decode(self.tokens, skip_special_tokens=True))
        cuts = [text.find(s) for s in self.stop if s in text]
        if cuts:
            return text[: min(cuts)]
        if text.endswith("\ufffd"):  # a multi-byte character still incomplete
            text = text.rstrip("\ufffd")
        return text[: len(text) - self.hold] if self.hold else text

    def delta(self, final: str | None = None) -> str:
        """New text to send (``final``: the finished text, sent in full)."""
        text = final if final is not None else self.settled()
        if not text.startswith(self.sent) or len(text) <= len(self.sent):
            return ""
        new, self.sent = text[len(self.sent) :], text
        return new


def _logprobs(tokenizer: Any, tokens: list[int], logprobs: list[float]) -> dict[str, Any]:
    content = []
    for token, logprob in zip(tokens, logprobs, strict=True):
        piece = str(tokenizer.decode([token]))
        content.append(
            {"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []}
        )
    return {"content": content}


def stream_chat(
    submit: Callable[[SampleRequest], Operation],
    prepared: Any,
    final_text: Callable[[Any, list[int], tuple[str, ...]], str],
) -> Iterator[dict[str, Any]]:
    """Chunk bodies for a prepared chat request (``Service.chat_prepare``), as decoded.

    ``submit`` queues a sample request on the scheduler and returns its operation;
    ``final_text`` is the service's completion-text rule (special tokens dropped, cut
    before a stop string). Raises ``ServiceError`` if sampling fails before anything
    was sent; a failure later raises it too (the server turns it into an error event).
    """
    request: protocol.ChatRequest = prepared.request
    tokenizer, prompt = prepared.tokenizer, prepared.prompt
    events: queue.Queue[_Event] = queue.Queue()
    sample = protocol.sample_request(
        request,
        prompt,
        on_token=lambda i, token, logprob: events.put((i, token, logprob)),
        stop_token_ids=prepared.stop_ids,
    )
    op = submit(sample)

    def closer() -> None:
        op.done.wait()
        events.put(None)

    threading.Thread(target=closer, name="chat-stream", daemon=True).start()
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": prepared.target,
        "system_fingerprint": "localsession",
    }

    def chunk(index: int, delta: dict[str, Any], logprobs: Any = None, finish: Any = None) -> Any:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {**base, "choices": [choice]}

    texts = [_ChoiceText(tokenizer, request.stop) for _ in range(request.n)]
    for i in range(request.n):
        yield chunk(i, {"role": "assistant", "content": ""})
    while (event := events.get()) is not None:
        i, token, logprob = event
        texts[i].tokens.append(token)
        new = texts[i].delta()
        logprobs = _logprobs(tokenizer, [token], [logprob]) if request.logprobs else None
        if new or logprobs is not None:
            yield chunk(i, {"content": new}, logprobs)
    if op.status != vocab.OpStatus.COMPLETED or not isinstance(op.result, SampleResult):
        raise errors.validation(f"sampling failed: {op.error}")
    sequences = op.result.sequences
    for i, seq in enumerate(sequences):
        tail = texts[i].delta(final_text(tokenizer, seq.tokens, request.stop))
        unsent = len(texts[i].tokens)  # tokens an engine that cannot stream never reported
        logprobs = None
        if request.logprobs and unsent < len(seq.tokens):
            logprobs = _logprobs(tokenizer, seq.tokens[unsent:], seq.logprobs[unsent:])
        if tail or logprobs is not None:
            yield chunk(i, {"content": tail}, logprobs)
        yield chunk(i, {}, None, seq.stop_reason)
    if request.include_usage:
        completion_tokens = sum(len(s.tokens) for s in sequences)
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt) + completion_tokens,
        }
        yield {**base, "choices": [], "usage": usage}
