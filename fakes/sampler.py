"""Sampling from a bigram table, with scripted completions first (docs/semantics.md#3).

A stream draws its tokens one at a time from ``table[previous token]``: temperature, then
top-k, then top-p (the torch engine's own filters), with a private generator seeded
``seed + i`` for sample i. It stops at the EOS ``<|im_end|>``, a stop token id or a stop
string (matched in the text decoded with special tokens skipped, as the torch engine matches
it; the returned tokens include the token that ended it; ``stop_reason`` ``"stop"``) or at
``max_tokens`` (``"length"``).
Reported logprobs are log-softmax(logits / T) of each token before filtering (T = 0: greedy,
T = 1 values). Scripted completions get the same truncation and, unless scripted too, the
same logprobs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fakes.script import Completion, Script, check_stop_ids, scripted_tokens, stop_reason
from fakes.tokenizer import VOCAB_SIZE, ByteTokenizer
from localsession.numerics.filters import (
    sample_from_logits,
    top_k_filter,
    top_p_filter,
)
from localsession.port import EngineInputError, SampleRequest
from localsession.port_results import SampledSequence, SampleResult, StopReason, TopLogprob

_TOKENIZER = ByteTokenizer()


def check_tokens(tokens: list[int], what: str) -> list[int]:
    if not tokens:
        raise EngineInputError(f"{what} must be a non-empty list of token ids")
    bad = [t for t in tokens if not isinstance(t, int) or not 0 <= t < VOCAB_SIZE]
    if bad:
        raise EngineInputError(
            f"{what} holds token id {bad[0]}, outside the vocabulary [0, {VOCAB_SIZE})"
        )
    return tokens


def _tempered_logprobs(
    table_VV: Tensor, prevs: list[int], targets: list[int], temperature: float
) -> list[float]:
    """log-softmax(table[prev] / T)[target] per pair (T = 1 for greedy)."""
    if not targets:
        return []
    t = temperature if temperature > 0 else 1.0
    rows_NV = torch.log_softmax(table_VV[torch.tensor(prevs)] / t, dim=-1)
    return rows_NV.gather(-1, torch.tensor(targets).unsqueeze(-1)).squeeze(-1).tolist()


def _generate(table_VV: Tensor, req: SampleRequest, i: int) -> SampledSequence:
    gen = torch.Generator().manual_seed((req.seed + i) % 2**63)
    tokens: list[int] = []
    reason: StopReason | None = None if req.max_tokens > 0 else "length"
    prev = req.prompt[-1]
    while reason is None:
        if req.temperature <= 0:
            token = int(table_VV[prev].argmax())
        else:
            tempered_1V = (table_VV[prev] / req.temperature).unsqueeze(0)
            filtered_1V = top_p_filter(
                top_k_filter(tempered_1V, torch.tensor([req.top_k])), torch.tensor([req.top_p])
            )
            token = int(sample_from_logits(filtered_1V, torch.rand(1, generator=gen))[0])
        tokens.append(token)
        prev, reason = token, stop_reason(tokens, req.stop, req.max_tokens, req.stop_token_ids)
    prevs = [req.prompt[-1], *tokens[:-1]]
    logprobs = _tempered_logprobs(table_VV, prevs, tokens, req.temperature)
    return SampledSequence(tokens, logprobs, reason)


def _scripted(table_VV: Tensor, req: SampleRequest, completion: Completion) -> SampledSequence:
    tokens, reason = scripted_tokens(completion, req.stop, req.max_tokens, req.stop_token_ids)
    if completion.logprobs is not None:
        logprobs = [float(x) for x in completion.logprobs[: len(tokens)]]
    else:
        prevs = [req.prompt[-1], *tokens[:-1]]
        logprobs = _tempered_logprobs(table_VV, prevs, tokens, req.temperature)
    return SampledSequence(tokens, logprobs, reason)


def prompt_logprobs(
    table_VV: Tensor, tokens: list[int], topk: int = 0
) -> tuple[list[float], list[list[TopLogprob]]]:
    """log p(tokens[t] | tokens[t-1]) at T = 1 (entry 0 is 0.0), and top-``topk`` per position."""
    values = [0.0, *_tempered_logprobs(table_VV, tokens[:-1], tokens[1:], 1.0)]
    top: list[list[TopLogprob]] = []
    if topk > 0 and len(tokens) > 1:
        rows = torch.log_softmax(table_VV[torch.tensor(tokens[:-1])], dim=-1)  # [L-1, V]
        vals, ids = rows.topk(min(topk, VOCAB_SIZE), dim=-1)
        top = [[]] + [
            [TopLogprob(t, v) for t, v in zip(r_ids, r_vals, strict=True)]
            for r_ids, r_vals in zip(ids.tolist(), vals.tolist(), strict=True)
        ]
    return values, top


def compute_logprobs(table_VV: Tensor, tokens: list[int]) -> list[float | None]:
    """Per-token log p(tokens[i] | tokens[i-1]) at T = 1; entry 0 is None."""
    values, _ = prompt_logprobs(table_VV, check_tokens(list(tokens), "`prompt`"))
    return [None, *values[1:]]


def sample_request(table_VV: Tensor, req: SampleRequest, script: Script, what: str) -> SampleResult:
    """The result of one request: scripted where the script answers."""
    prompt = check_tokens(list(req.prompt), f"{what}: `prompt`")
    check_stop_ids(req, what)
    scripted = script.resolve_request(prompt, req, what)
    sequences = [
        _generate(table_VV, req, i) if c is None else _scripted(table_VV, req, c)
        for i, c in enumerate(scripted)
    ]
    topk = req.topk_prompt_logprobs or 0
    if not (req.include_prompt_logprobs or topk > 0):
        return SampleResult(sequences)
    values, top = prompt_logprobs(table_VV, prompt, topk)
    return SampleResult(
        sequences,
        prompt_logprobs=values if req.include_prompt_logprobs else None,
        topk_prompt_logprobs=top if topk > 0 else None,
    )
