"""Scripted sampling: fix what ``sample`` returns, by prompt, by policy, or from a queue.

For every ``sample`` request the fake engine asks :meth:`Script.resolve` for one completion per
sample. The first source that answers wins:

1. **prompt rules** (:meth:`Script.on_prompt`), newest first: a prompt given as text matches
   the request's prompt decoded with special tokens skipped (``match="exact"`` or
   ``"contains"``); a prompt given as token ids matches the exact ids;
2. **the queue** (:meth:`Script.enqueue`): each sample takes the next queued completion
   (when the queue runs out part-way through a request, its remaining samples come from the
   model);
3. **policies** (:meth:`Script.policy`), newest first: a callable that sees the prompt
   (:class:`PromptInfo`) and returns completions, or ``None`` to pass;
4. **the fake model**, which samples as the real engine does (seeded, tempered, top-k/top-p).

A rule or policy that returns k completions for n samples gives sample i completion
``i % k``.

**Logprobs.** A scripted completion's tokens are fixed; its logprobs are *computed from the
fake model* (the weights the request samples, at the request's temperature, as the real
sampler reports them), so importance ratios start at 1, exactly as with real samples. Give
``Completion(..., logprobs=[...])`` to script them too; those are returned verbatim.

**Stopping.** A text completion gets the EOS token ``<|im_end|>`` (id 258) appended
(``eos=False`` to leave it off), as a real completion ends: its text decodes to
``"...<|im_end|>"``, and to the plain text with ``skip_special_tokens=True``, exactly as the
built-in models' tokenizer decodes a real completion. ``max_tokens`` and stop strings
truncate scripted completions the way they truncate generated ones (``stop_reason``
``"length"`` / ``"stop"``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from fakes.tokenizer import EOS_ID, VOCAB_SIZE, ByteTokenizer
from localsession.port import EngineInputError, SampleRequest
from localsession.port_results import StopReason

_TOKENIZER = ByteTokenizer()


@dataclass(frozen=True)
class Completion:
    """One scripted completion: text or token ids, optionally with its logprobs."""

    text: str | None = None
    tokens: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    #: Reported when the completion ends without EOS, a stop string or ``max_tokens``.
    stop_reason: str = "stop"
    #: Append the EOS token (``<|im_end|>``) to a text completion.
    eos: bool = True

    def __post_init__(self) -> None:
        if (self.text is None) == (self.tokens is None):
            raise ValueError("Completion: give exactly one of text= or tokens=")
        if self.tokens is not None:
            bad = [t for t in self.tokens if not isinstance(t, int) or not 0 <= t < VOCAB_SIZE]
            if bad:
                raise ValueError(f"Completion tokens {bad[:3]} are outside [0, {VOCAB_SIZE})")
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids()):
            raise ValueError(
                f"Completion has {len(self.token_ids())} tokens but {len(self.logprobs)} "
                "logprobs; give one logprob per token (with eos=True that includes the EOS token)"
            )
        if self.stop_reason not in ("stop", "length"):
            raise ValueError(
                f"Completion stop_reason must be 'stop' or 'length', not {self.stop_reason!r}"
            )

    def token_ids(self) -> list[int]:
        if self.tokens is not None:
            return list(self.tokens)
        assert self.text is not None
        ids = _TOKENIZER.encode(self.text, add_special_tokens=False)
        return [*ids, EOS_ID] if self.eos else ids


CompletionLike = str | Sequence[int] | Completion


@dataclass(frozen=True)
class PromptInfo:
    """What a policy sees of a ``sample`` request."""

    tokens: tuple[int, ...]
    text: str  # decoded with special tokens skipped
    num_samples: int
    max_tokens: int
    temperature: float
    seed: int


PolicyResult = CompletionLike | Sequence[CompletionLike] | None
Policy = Callable[[PromptInfo], PolicyResult]


def as_completion(value: CompletionLike) -> Completion:
    """A :class:`Completion` from text, token ids, or a Completion."""
    if isinstance(value, Completion):
        return value
    if isinstance(value, str):
        return Completion(text=value)
    return Completion(tokens=tuple(int(t) for t in value))


def as_completions(value: PolicyResult) -> list[Completion] | None:
    """One completion, or a list of them, as a list (token-id lists count as one)."""
    if value is None:
        return None
    if isinstance(value, (str, Completion)):
        return [as_completion(value)]
    items = list(value)
    if items and all(isinstance(t, int) for t in items):
        return [as_completion(items)]  # type: ignore[arg-type]
    if not items:
        raise ValueError("a scripted answer must hold at least one completion")
    return [as_completion(v) for v in items]  # type: ignore[arg-type]


@dataclass
class _Rule:
    text: str | None
    tokens: tuple[int, ...] | None
    match: str
    completions: list[Completion]

    def matches(self, info: PromptInfo) -> bool:
        if self.tokens is not None:
            return info.tokens == self.tokens
        assert self.text is not None
        return info.text == self.text if self.match == "exact" else self.text in info.text


class Script:
    """What the fake engine's ``sample`` returns. Thread-safe."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._rules: list[_Rule] = []
        self._queue: deque[Completion] = deque()
        self._policies: list[Policy] = []

    def on_prompt(
        self, prompt: str | Sequence[int], *completions: CompletionLike, match: str = "exact"
    ) -> None:
        """Answer ``prompt`` (text, or exact token ids) with ``completions`` (sample i gets
        ``completions[i % len]``). ``match="contains"``: text anywhere in the prompt."""
        if match not in ("exact", "contains"):
            raise ValueError(f"match={match!r}: use 'exact' or 'contains'")
        if not completions:
            raise ValueError("on_prompt: give at least one completion")
        scripted = [as_completion(c) for c in completions]
        if isinstance(prompt, str):
            rule = _Rule(prompt, None, match, scripted)
        else:
            rule = _Rule(None, tuple(int(t) for t in prompt), "exact", scripted)
        with self._mutex:
            self._rules.append(rule)

    def enqueue(self, *completions: CompletionLike) -> None:
        """Queue completions; each sample no prompt rule answers takes the next one."""
        items = [as_completion(c) for c in completions]
        with self._mutex:
            self._queue.extend(items)

    def policy(self, fn: Policy) -> Policy:
        """Add a policy (usable as a decorator). It returns completions, or None to pass."""
        with self._mutex:
            self._policies.append(fn)
        return fn

    def clear(self) -> None:
        """Forget every rule, queued completion and policy."""
        with self._mutex:
            self._rules.clear()
            self._queue.clear()
            self._policies.clear()

    @property
    def queued(self) -> int:
        """Completions still queued."""
        return len(self._queue)

    def resolve(self, info: PromptInfo) -> list[Completion | None]:
        """One scripted completion per sample, ``None`` where the fake model samples."""
        n = info.num_samples
        with self._mutex:
            for rule in reversed(self._rules):
                if rule.matches(info):
                    return [rule.completions[i % len(rule.completions)] for i in range(n)]
            if self._queue:
                taken: list[Completion | None] = []
                while self._queue and len(taken) < n:
                    taken.append(self._queue.popleft())
                return taken + [None] * (n - len(taken))
            policies = list(reversed(self._policies))
        for fn in policies:  # outside the lock: a policy may script more
            answer = as_completions(fn(info))
            if answer is not None:
                return [answer[i % len(answer)] for i in range(n)]
        return [None] * n

    def resolve_request(
        self, prompt: list[int], req: SampleRequest, what: str
    ) -> list[Completion | None]:
        """:meth:`resolve` for a checked sampling request; a policy that raises fails the op
        (``EngineInputError`` naming the request), not the scheduler."""
        info = PromptInfo(
            tokens=tuple(prompt),
            text=_TOKENIZER.decode(prompt, skip_special_tokens=True),
            num_samples=req.num_samples,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            seed=req.seed,
        )
        try:
            return self.resolve(info)
        except Exception as exc:  # noqa: BLE001 - a broken policy fails the op, not the scheduler
            raise EngineInputError(f"{what}: the script's policy raised {exc!r}") from exc


def check_stop_ids(req: SampleRequest, what: str) -> None:
    """Refuse a request whose stop token ids leave the vocabulary, as the torch engine does."""
    outside = [t for t in req.stop_token_ids if not 0 <= t < VOCAB_SIZE]
    if outside:
        raise EngineInputError(
            f"{what}: stop token id {outside[0]} is outside the vocabulary [0, {VOCAB_SIZE}); "
            "pass ids the model's tokenizer produces"
        )


def stop_reason(
    tokens: list[int], stop: tuple[str, ...], max_tokens: int, stop_ids: Collection[int] = ()
) -> StopReason | None:
    """Why a fake engine's sample stream whose last token is ``tokens[-1]`` ends there, or
    None to go on (both fake engines stop the same way): EOS or one of ``stop_ids`` (the
    request's stop token ids) the step it is drawn, or a stop string, matched in the text
    decoded with special tokens skipped, as the torch engine matches it, so a sampled
    ``<|endoftext|>`` never completes the stop string ``"e"``."""
    if tokens[-1] == EOS_ID or tokens[-1] in stop_ids:
        return "stop"
    text = _TOKENIZER.decode(tokens, skip_special_tokens=True) if stop else ""
    if any(s and s in text for s in stop):
        return "stop"
    if len(tokens) >= max_tokens:
        return "length"
    return None


def scripted_tokens(
    completion: Completion, stop: tuple[str, ...], max_tokens: int, stop_ids: Collection[int] = ()
) -> tuple[list[int], StopReason]:
    """The tokens a request receives of a scripted completion, and its stop reason: cut
    where the request's stop strings, stop ids or ``max_tokens`` end the stream (as a sampled
    stream would be, :func:`stop_reason`), else the whole completion with the completion's
    own reason."""
    tokens: list[int] = []
    reason: StopReason | None = "length" if max_tokens <= 0 else None
    for token in completion.token_ids():
        if reason is not None:
            break
        tokens.append(token)
        reason = stop_reason(tokens, stop, max_tokens, stop_ids)
    return tokens, reason or ("length" if completion.stop_reason == "length" else "stop")
