"""The stop token ids of a ``sample`` op (docs/semantics.md#3), settled once at submit time.

Two sources: ids a caller passed beside the wire request (the Tinker dialect's integer
``stop`` entries; the SageMaker wire has no such member), checked here to be integers >= 0
(the engine checks they are inside its vocabulary), and stop *strings* that are exactly one
special token. Engines match stop strings in text decoded with special tokens skipped, where
such a token leaves no trace, so ``stop=["<|im_end|>"]`` could never match; it stops at
that token's id instead. A string counts when the session's tokenizer encodes it, without
added specials, as one id that decodes to nothing with special tokens skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from localsession.runtime import errors


def checked_ids(given: Sequence[Any]) -> list[int]:
    """``given`` as plain ints, each an integer >= 0 (a ``ValidationException`` otherwise)."""
    for value in given:
        if type(value) is not int or value < 0:
            raise errors.validation(
                f"stop token id {value!r} must be an integer >= 0; pass ids that the "
                "model's tokenizer produces (or the stop as a string)"
            )
    return [int(value) for value in given]


def special_ids(tokenizer: Any, stops: Sequence[str]) -> list[int]:
    """The id of each stop string the tokenizer knows as one special token."""
    found: list[int] = []
    for text in stops:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1 and tokenizer.decode(ids, skip_special_tokens=True) == "":
            found.append(int(ids[0]))
    return found


def stop_token_ids(given: Sequence[Any], stops: Sequence[str], tokenizer: Any) -> tuple[int, ...]:
    """The request's stop ids: ``given`` (checked), then the special stop strings' ids, each
    once, in that order. ``tokenizer`` is ``None`` when the session has no model to ask."""
    ids = checked_ids(given)
    if stops and tokenizer is not None:
        ids += special_ids(tokenizer, stops)
    return tuple(dict.fromkeys(ids))
