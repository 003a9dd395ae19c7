"""Sampling filters (docs/semantics.md#3): pure functions over ``[S, V]`` logits.

One parameter per row: temperature, then top-k, then top-p on the renormalised top-k
distribution, then an inverse-CDF draw from given uniforms. Both the torch engine's batched
sampler and the fakes' bigram sampler use them, so the two sample by the same rules.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _host_readable(t: Tensor) -> bool:
    """Whether ``t``'s values can steer the computation: a CPU tensor (reading it costs no
    device sync) outside ``torch.compile``'s tracing. The CPU shortcuts below depend on it."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def apply_temperature(logits_SV: Tensor, temperature_S: Tensor) -> Tensor:
    """logits / T per row; rows with T == 0 (greedy) are returned unscaled. When no row
    scales (every T is 1 or 0) the logits come back as they are, which is what dividing by
    1 gives, without a pass over them."""
    unscaled_S = temperature_S <= 0
    if bool(((temperature_S == 1) | unscaled_S).all()):
        return logits_SV
    t_S = torch.where(unscaled_S, torch.ones_like(temperature_S), temperature_S)
    return logits_SV / t_S.to(logits_SV.dtype).unsqueeze(-1)


def top_k_filter(logits_SV: Tensor, k_S: Tensor, *, synced: bool = True) -> Tensor:
    """Keep each row's ``k`` largest logits (a tie at the boundary: the ones the selection
    puts first).

    Rows with ``k <= 0`` or ``k >= V`` are unchanged. Others are set to -inf.
    ``synced=False`` skips the host check that no row filters (a device sync), for a step
    that must not sync (decode_step.py): the same values either way. Where the largest
    ``k`` can be read without a device sync (a CPU tensor, not traced), only that many
    are selected (``topk``) rather than the whole row sorted: 6 against 175 ms for 64
    rows of 49,152 words with k = 50.
    """
    vocab = logits_SV.shape[-1]
    active_S = (k_S > 0) & (k_S < vocab)
    if synced and not bool(active_S.any()):
        return logits_SV
    rank_S1 = k_S.unsqueeze(-1)
    if _host_readable(k_S):
        most = int(torch.where(active_S, k_S, 0).max())
        if most == 0:
            return logits_SV
        top_SK, order_SK = logits_SV.topk(most, dim=-1)  # sorted, largest first
        rank_K = torch.arange(most, device=logits_SV.device)
        top_SK = top_SK.masked_fill_(rank_K.unsqueeze(0) >= rank_S1, float("-inf"))
        kept_SV = torch.full_like(logits_SV, float("-inf")).scatter_(-1, order_SK, top_SK)
        return torch.where(active_S.unsqueeze(-1), kept_SV, logits_SV)
    sorted_SV, order_SV = logits_SV.sort(dim=-1, descending=True)
    rank_V = torch.arange(vocab, device=logits_SV.device)
    drop_SV = (rank_V.unsqueeze(0) >= rank_S1) & active_S.unsqueeze(-1)
    sorted_SV = sorted_SV.masked_fill(drop_SV, float("-inf"))
    return torch.empty_like(logits_SV).scatter_(-1, order_SV, sorted_SV)


#: Largest logits a CPU top-p filter looks for the nucleus among before sorting whole rows.
TOP_P_PREFIX = 1024


def top_p_filter(logits_SV: Tensor, p_S: Tensor, *, synced: bool = True) -> Tensor:
    """Nucleus filter: keep the smallest set of top tokens whose probability reaches ``p``.

    A token is kept when the probability mass strictly before it (in descending order) is
    below ``p``; the top token is always kept. Rows with ``p >= 1`` are unchanged.
    ``synced=False``: as in :func:`top_k_filter`. On a CPU (not traced) the nucleus is
    looked for among each row's :data:`TOP_P_PREFIX` largest logits (``topk``: ~19 ms for
    64 rows of 49,152 words, against 175 ms to sort them); only rows whose prefix holds
    less than ``p`` of their mass are sorted whole. The two ways sum the softmax's
    normaliser in different orders, so a token whose mass before lies within float rounding
    of ``p`` may be kept by one and dropped by the other.
    """
    active_S = p_S < 1.0
    if synced and not bool(active_S.any()):
        return logits_SV
    p_S1, active_S1 = p_S.unsqueeze(-1).float(), active_S.unsqueeze(-1)
    if not _host_readable(p_S) or logits_SV.shape[-1] <= TOP_P_PREFIX:
        return _nucleus_by_sort(logits_SV, p_S1, active_S1)
    if not bool(active_S.any()):
        return logits_SV
    top_SK, order_SK = logits_SV.topk(TOP_P_PREFIX, dim=-1)  # sorted, largest first
    log_total_S1 = torch.logsumexp(logits_SV.float(), dim=-1, keepdim=True)
    probs_SK = torch.exp(top_SK.float() - log_total_S1)
    mass_SK = probs_SK.cumsum(dim=-1)
    drop_SK = (mass_SK - probs_SK >= p_S1) & active_S1
    drop_SK[:, 0] = False
    kept_SK = top_SK.masked_fill(drop_SK, float("-inf"))
    kept_SV = torch.full_like(logits_SV, float("-inf")).scatter_(-1, order_SK, kept_SK)
    kept_SV = torch.where(active_S1, kept_SV, logits_SV)
    short_S = (mass_SK[:, -1] < p_S1[:, 0]) & active_S  # a nucleus past the prefix
    if bool(short_S.any()):
        rows = short_S.nonzero().squeeze(-1)
        kept_SV[rows] = _nucleus_by_sort(logits_SV[rows], p_S1[rows], active_S1[rows])
    return kept_SV


def _nucleus_by_sort(logits_SV: Tensor, p_S1: Tensor, active_S1: Tensor) -> Tensor:
    """:func:`top_p_filter` over whole sorted rows."""
    sorted_SV, order_SV = logits_SV.sort(dim=-1, descending=True)
    probs_SV = torch.softmax(sorted_SV.float(), dim=-1)
    before_SV = probs_SV.cumsum(dim=-1) - probs_SV  # mass strictly before each token
    drop_SV = (before_SV >= p_S1) & active_S1
    drop_SV[:, 0] = False
    sorted_SV = sorted_SV.masked_fill(drop_SV, float("-inf"))
    return torch.empty_like(logits_SV).scatter_(-1, order_SV, sorted_SV)


def filter_logits(logits_SV: Tensor, temperature_S: Tensor, k_S: Tensor, p_S: Tensor) -> Tensor:
    """Temperature, then top-k, then top-p (on the renormalised top-k distribution)."""
    return top_p_filter(top_k_filter(apply_temperature(logits_SV, temperature_S), k_S), p_S)


#: Columns per block of :func:`row_argmax`'s first pass.
ARGMAX_BLOCK = 1024


def row_argmax(logits_SV: Tensor) -> Tensor:
    """``logits_SV.argmax(-1)``, the same index (ties: the first; NaN: the first NaN). On a
    CPU in two passes, since torch's ``argmax`` there walks a row one value at a time and
    ``amax`` does not (64 rows of 49,152 words: ~4.1 ms against ~0.6): each block of
    :data:`ARGMAX_BLOCK` columns' max, then ``argmax`` within the first block holding the
    row's max; columns past the last whole block are compared with it."""
    rows, vocab = logits_SV.shape
    blocks = vocab // ARGMAX_BLOCK
    if logits_SV.device.type != "cpu" or blocks < 2 or logits_SV.stride(-1) != 1:
        return logits_SV.argmax(dim=-1)
    whole = blocks * ARGMAX_BLOCK
    head_SNC = logits_SV[:, :whole].view(rows, blocks, ARGMAX_BLOCK)
    best_SN = head_SNC.amax(dim=-1)
    block_S = best_SN.argmax(dim=-1)  # the first block holding the max (or a NaN)
    row_S = torch.arange(rows, device=logits_SV.device)
    index_S = block_S * ARGMAX_BLOCK + head_SNC[row_S, block_S].argmax(dim=-1)
    if whole == vocab:
        return index_S
    tail_SR = logits_SV[:, whole:]
    head_S, tail_S = best_SN[row_S, block_S], tail_SR.amax(dim=-1)
    later_S = (tail_S > head_S) | (tail_S.isnan() & ~head_S.isnan())
    return torch.where(later_S, whole + tail_SR.argmax(dim=-1), index_S)


def sample_from_logits(
    filtered_SV: Tensor, uniform_S: Tensor, work_SV: Tensor | None = None
) -> Tensor:
    """Inverse-CDF draw: one token id per row from softmax(filtered), given U[0, 1) draws.
    ``work_SV``: a float32 buffer shaped like the logits to compute in (else one is made)."""
    probs_SV = torch.softmax(filtered_SV.float(), dim=-1, out=work_SV)
    cdf_SV = probs_SV.cumsum_(dim=-1)  # in place: the same values as cumsum, one buffer less
    target_S1 = (uniform_S.float() * cdf_SV[:, -1]).unsqueeze(-1)
    # right=True: the first index whose cdf exceeds u; zero-probability tokens are never hit.
    idx_S = torch.searchsorted(cdf_SV, target_S1, right=True).squeeze(-1)
    return idx_S.clamp_(max=filtered_SV.shape[-1] - 1)
