"""Checks on a sampling or logprob request before any tensor reaches the model.

``TorchEngine.sample`` and ``compute_logprobs`` call these first: a bad prompt (not a list,
empty, a non-integer, an id outside the vocabulary), a stop token id outside the vocabulary,
a bad sampling parameter or a request longer than the model's context raises
``EngineInputError`` naming the request and the fix, and nothing in the engine has changed.
Requests joining a running batch (``admitter``) are checked the same way, each as a lone
request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from localsession.engine.batch import check_vocab, int_tensor
from localsession.port import Admit, EngineInputError, SampleRequest


def check_prompt(tokens: Sequence[Any], vocab_size: int, what: str) -> list[int]:
    """``tokens`` as plain ints, each in ``[0, vocab_size)``; ``what`` names it in errors."""
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise EngineInputError(f"{what} must be a non-empty list of token ids")
    ids = int_tensor(list(tokens), what)
    check_vocab(ids, vocab_size, what)
    return [int(t) for t in ids.tolist()]


def check_request(
    index: int, req: SampleRequest, vocab_size: int, max_positions: int | None
) -> SampleRequest:
    """Request ``index`` of a sample batch, checked (every problem named in one error), with
    its prompt as plain ints."""
    what = f"request {index}"
    prompt = check_prompt(req.prompt, vocab_size, f"{what}: `prompt`")
    problems = []
    if req.num_samples < 1:
        problems.append(f"`num_samples` must be >= 1, got {req.num_samples}")
    if req.max_tokens < 0:
        problems.append(f"`max_tokens` must be >= 0, got {req.max_tokens}")
    if not req.temperature >= 0:
        problems.append(f"`temperature` must be >= 0, got {req.temperature}")
    if not 0 < req.top_p <= 1:
        problems.append(f"`top_p` must be in (0, 1], got {req.top_p}")
    outside = [t for t in req.stop_token_ids if not 0 <= t < vocab_size]
    if outside:
        problems.append(
            f"stop token id {outside[0]} is outside the vocabulary [0, {vocab_size}); "
            "pass ids the model's tokenizer produces"
        )
    if req.topk_sample_logprobs < 0:
        problems.append(f"`topk_sample_logprobs` must be >= 0, got {req.topk_sample_logprobs}")
    if req.prompt_alt_tokens_k < 0:
        problems.append(f"`prompt_alt_tokens_k` must be >= 0, got {req.prompt_alt_tokens_k}")
    if req.prompt_alt_tokens_k > 0 and len(prompt) < 2:
        problems.append("`prompt_alt_tokens_k` needs a prompt of at least 2 tokens")
    targets = req.target_prompt_logprobs
    if targets is not None:
        if len(targets) != len(prompt) - 1 or len({len(row) for row in targets}) > 1:
            problems.append(
                f"`target_prompt_logprobs` must be a [len(prompt) - 1, K] = "
                f"[{len(prompt) - 1}, K] table of token ids, got {len(targets)} rows"
            )
        bad = [t for row in targets for t in row if not -1 <= t < vocab_size]
        if bad:
            problems.append(
                f"`target_prompt_logprobs` holds token id {bad[0]}, outside the vocabulary "
                f"[0, {vocab_size}) (-1 asks nothing)"
            )
    limit = max_positions
    if limit is not None and len(prompt) + max(req.max_tokens, 0) > limit:
        problems.append(
            f"the prompt's {len(prompt)} tokens plus max_tokens={req.max_tokens} make "
            f"{len(prompt) + req.max_tokens} positions, past the model's maximum context "
            f"length of {limit}; shorten the prompt or lower max_tokens"
        )
    if problems:
        raise EngineInputError(f"{what}: " + "; ".join(problems))
    plain: dict[str, Any] = {} if prompt == req.prompt else {"prompt": prompt}
    if req.top_k > vocab_size:  # keeps every word, as k = V does (a k past 2**63 fits no tensor)
        plain["top_k"] = vocab_size
    return dataclasses.replace(req, **plain) if plain else req


def check_logprobs_prompt(
    tokens: Sequence[Any], vocab_size: int, max_positions: int | None
) -> list[int]:
    """The prompt of a ``compute_logprobs`` call, checked and within the model's context."""
    ids = check_prompt(tokens, vocab_size, "`prompt`")
    if max_positions is not None and len(ids) > max_positions:
        raise EngineInputError(
            f"`prompt` has {len(ids)} tokens, past the model's maximum context length of "
            f"{max_positions}; shorten it"
        )
    return ids


def admitter(
    admit: Admit, checked: list[SampleRequest], vocab_size: int, max_positions: int | None
) -> Callable[[], list[SampleRequest]]:
    """The sampler's joiner for the runtime's ``admit`` (port.Admit): each request it
    hands over is checked as a lone request 0 would be, and appended to ``checked`` (the
    batch's responses follow that list, joiners in admission order)."""

    def joiner() -> list[SampleRequest]:
        new = admit(lambda r: check_request(0, r, vocab_size, max_positions))
        checked.extend(new)
        return new

    return joiner
