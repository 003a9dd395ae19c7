"""Teacher-forced scoring (docs/semantics.md#3): the logprobs of tokens that are given, not
decoded, in one forward over the prompt without a KV cache.

- :func:`batch_logprobs`: ``compute_logprobs`` of several prompts, right-padded into as few
  forwards as ``LOGPROB_LOGIT_BYTES`` allows (``shared_prefix`` packs shared prefixes
  around it);
- :func:`prompt_logprobs`: a sample request's prompt logprobs and their top-k alternatives,
  through ``token_logprobs`` (``forward``'s values to float rounding);
- :func:`target_logprobs`: the logprobs of named ids at each prompt position;
- :func:`prompt_alt_tokens`: seeded draws from each prompt position's distribution;
- :func:`with_prompt_scores`: all of those a request asks for, written into its result.

The decoder itself is :mod:`localsession.engine.sampling`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from localsession.engine.streams import seeded_generator
from localsession.numerics.filters import apply_temperature, row_argmax
from localsession.numerics.losses import token_logprobs
from localsession.port import SampleRequest
from localsession.port_results import PromptAltTokens, SampleResult, TopLogprob

#: Float32 logits one ``batch_logprobs`` forward may produce: prompts are grouped under it
#: (SmolLM2-135M: 8 prompts of 256 tokens, 404 MB, in one forward).
LOGPROB_LOGIT_BYTES = 512 * 2**20


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    pad_id: int,
    vocab_size: int,
    device: torch.device,
) -> list[list[float]]:
    """Each prompt's log p(tokens[i] | tokens[:i]) at T = 1 for i >= 1, several prompts per
    forward: right-padded with ``pad_id`` (causal attention: no position sees the padding
    after it), in groups of at most ``LOGPROB_LOGIT_BYTES`` of float32 logits. One prompt
    alone runs exactly as ``forward`` runs an unpadded datum. Eight prompts of 256 tokens on
    SmolLM2-135M: 3.8 s in one forward, 4.3 s one at a time."""
    out: list[list[float]] = []
    start = 0
    while start < len(prompts):
        stop, width = start + 1, len(prompts[start])
        while stop < len(prompts):
            wider = max(width, len(prompts[stop]))
            if (stop + 1 - start) * wider * vocab_size * 4 > LOGPROB_LOGIT_BYTES:
                break
            stop, width = stop + 1, wider
        group = prompts[start:stop]
        ids_BL = torch.tensor([p + [pad_id] * (width - len(p)) for p in group], device=device)
        logits_BLV = model(input_ids=ids_BL, use_cache=False)["logits"]
        lp_rows = token_logprobs(logits_BLV[:, :-1], ids_BL[:, 1:]).tolist()  # [B, L-1]
        del logits_BLV
        out.extend(row[: len(p) - 1] for row, p in zip(lp_rows, group, strict=True))
        start = stop
    return out


@torch.no_grad()
def prompt_alt_tokens(
    model: torch.nn.Module,
    tokens: list[int],
    k: int,
    temperature: float,
    seed: int,
    device: torch.device,
) -> tuple[list[list[int]], list[list[float]]]:
    """``k`` draws with replacement from the distribution over each prompt token ``i + 1``
    (rows ``len(tokens) - 1``) at ``temperature`` (0: the argmax, k times), from a CPU
    generator seeded ``seed``. -> (ids [L-1][k], their log-softmax(logits / T) [L-1][k])."""
    ids_1L = torch.tensor([tokens], dtype=torch.long, device=device)
    logits_LV = model(input_ids=ids_1L, use_cache=False)["logits"][0, :-1].float()
    temp_L = torch.full((logits_LV.shape[0],), float(temperature), device=logits_LV.device)
    logprobs_LV = torch.log_softmax(apply_temperature(logits_LV, temp_L), dim=-1)
    if temperature <= 0:
        drawn_LK = row_argmax(logits_LV).unsqueeze(-1).expand(-1, k)
    else:
        gen = seeded_generator(seed)
        probs_LV = logprobs_LV.exp().cpu()
        drawn_LK = torch.multinomial(probs_LV, k, replacement=True, generator=gen)
        drawn_LK = drawn_LK.to(logprobs_LV.device)
    picked_LK = logprobs_LV.gather(-1, drawn_LK)
    return drawn_LK.tolist(), picked_LK.tolist()


@torch.no_grad()
def target_logprobs(
    model: torch.nn.Module,
    tokens: list[int],
    targets: Sequence[Sequence[int]],
    device: torch.device,
) -> list[list[float | None]]:
    """log p(targets[i][j] | tokens[: i + 1]) at T = 1 for each prompt position i + 1 (rows
    ``len(tokens) - 1``); a -1 cell gets None."""
    ids_1L = torch.tensor([tokens], dtype=torch.long, device=device)
    logits_LV = model(input_ids=ids_1L, use_cache=False)["logits"][0, :-1].float()
    logprobs_LV = torch.log_softmax(logits_LV, dim=-1)
    wanted_LK = torch.tensor([list(row) for row in targets], dtype=torch.long, device=device)
    picked_LK = logprobs_LV.gather(-1, wanted_LK.clamp(min=0))
    return [
        [None if t < 0 else v for t, v in zip(ids, vals, strict=True)]
        for ids, vals in zip(wanted_LK.tolist(), picked_LK.tolist(), strict=True)
    ]


@torch.no_grad()
def prompt_logprobs(
    model: torch.nn.Module, tokens: list[int], device: torch.device, topk: int = 0
) -> tuple[list[float], list[list[TopLogprob]]]:
    """log p(tokens[i] | tokens[:i]) at T = 1 for i >= 1 (entry 0 is 0.0), plus per-position
    top-``topk`` alternatives (position 0: empty list)."""
    ids_1L = torch.tensor([tokens], dtype=torch.long, device=device)
    logits_1LV = model(input_ids=ids_1L, use_cache=False)["logits"]
    # Position t predicts tokens[t + 1]; ``forward`` on an unpadded datum agrees to float
    # rounding (its fused head, head_logprobs.py, makes the same sums in another order).
    chosen_1L = token_logprobs(logits_1LV[:, :-1], ids_1L[:, 1:])
    values = [0.0, *chosen_1L[0].tolist()]
    top: list[list[TopLogprob]] = []
    if topk > 0:
        logprobs_LV = torch.log_softmax(logits_1LV[0, :-1].float(), dim=-1)
        k = min(topk, logprobs_LV.shape[-1])
        top_vals, top_ids = logprobs_LV.topk(k, dim=-1)
        top = [[]] + [
            [TopLogprob(t, v) for t, v in zip(ids, vals, strict=True)]
            for ids, vals in zip(top_ids.tolist(), top_vals.tolist(), strict=True)
        ]
    return values, top


def asks_prompt_scores(request: SampleRequest) -> bool:
    """Whether a sample request asks for anything :func:`with_prompt_scores` adds."""
    return (
        request.include_prompt_logprobs
        or (request.topk_prompt_logprobs or 0) > 0
        or request.target_prompt_logprobs is not None
        or request.prompt_alt_tokens_k > 0
    )


def with_prompt_scores(
    result: SampleResult, model: torch.nn.Module, request: SampleRequest, device: torch.device
) -> SampleResult:
    """``result`` with the prompt scores ``request`` asks for, read from ``model``: prompt
    logprobs, their top-k, target-id logprobs and seeded alternative tokens."""
    topk = request.topk_prompt_logprobs or 0
    values, top = prompt_logprobs(model, request.prompt, device, topk)
    targets = None
    if request.target_prompt_logprobs is not None:
        targets = target_logprobs(model, request.prompt, request.target_prompt_logprobs, device)
    alts = None
    if request.prompt_alt_tokens_k > 0:
        alt_ids, alt_lps = prompt_alt_tokens(
            model,
            request.prompt,
            request.prompt_alt_tokens_k,
            request.temperature,
            request.seed,
            device,
        )
        alts = PromptAltTokens(alt_ids, alt_lps)
    return replace(
        result,
        prompt_logprobs=values if request.include_prompt_logprobs else None,
        topk_prompt_logprobs=top if topk > 0 else None,
        target_prompt_logprobs=targets,
        prompt_alt_tokens=alts,
    )
