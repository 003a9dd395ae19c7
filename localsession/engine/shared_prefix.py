"""Shared-prefix batches: datums of one request that start with the same tokens compute those
tokens once (docs/semantics.md, "Shared prefixes").

A GRPO batch is G completions of each prompt, so most of its tokens are the same prompt G
times. :func:`plan` groups the datums (numerics/prefix_groups.py) and, when the per-batch rule
says it pays, the step runs one packed row per group (:func:`packed_logprobs`): the prefix
once, then each member's suffix; a 4-D additive attention mask lets every suffix see the
prefix and itself (causally) but never a sibling, and position ids restart at the prefix
length for each suffix, so every position sees exactly the keys, values and positions it
sees in its own row. Logits are computed once per packed position; each datum's
log-probabilities are gathered from them with its own targets, so per-datum logprobs, losses,
metrics and the summed gradients equal the unshared computation up to float rounding (the
prefix's gradient is the sum over its members, as autograd sums it unshared).

``LOCALSESSION_SHARED_PREFIX`` (``EngineOptions.shared_prefix``) chooses, each mode decided
once per process and device:

- ``auto`` (the default): a probe checks that the masked attention agrees with causal
  attention, and times the two on the engine's device and dtype; the masked kernel's cost
  factor weighs the attention term of the per-batch rule (``sharing_pays``). A batch that
  shares too little runs unshared.
- ``on``: every batch with a group of two or more datums runs packed (after the agreement
  check); ``off``: never.

engine_options.py checks the value, with the engine's other settings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from localsession.engine import scoring
from localsession.engine.batch import Batch
from localsession.engine.head_logprobs import target_logprobs
from localsession.engine.loading import LoadedModel
from localsession.numerics import prefix_groups
from localsession.numerics.prefix_groups import Group

SHARED_ENV = "LOCALSESSION_SHARED_PREFIX"
MODES = ("auto", "on", "off")
#: Longest packed row a group may grow to (a single longer datum still runs alone).
MAX_ROW_TOKENS = 4096

_log = logging.getLogger("localsession.engine.shared_prefix")
_lock = threading.Lock()
#: (mode, device type, dtype) -> (whether batches may share, the masked attention's cost
#: factor, why): each decided once per process
_decisions: dict[tuple[str, str, torch.dtype], tuple[bool, float, str]] = {}


def _block_mask(seg_L: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask of one or more packed rows. ``seg_RL``: 0 on the prefix, k + 1
    on member k's suffix, -1 on padding. -> ``[R, 1, L, L]``: 0 where query q may see key k
    (k <= q, and k in the prefix or q's own suffix; padding sees itself only), else the
    dtype's minimum."""
    seg_RL = seg_L if seg_L.dim() == 2 else seg_L.unsqueeze(0)
    width = seg_RL.shape[1]
    idx_L = torch.arange(width, device=seg_RL.device)
    causal_LL = idx_L[None, :] <= idx_L[:, None]  # [q, k]
    q_RL1, k_R1L = seg_RL[:, :, None], seg_RL[:, None, :]
    seen_RLL = causal_LL & (q_RL1 >= 0) & (k_R1L >= 0) & ((k_R1L == 0) | (k_R1L == q_RL1))
    seen_RLL = seen_RLL | torch.eye(width, dtype=torch.bool, device=seg_RL.device)
    zero = torch.zeros((), dtype=dtype, device=seg_RL.device)
    low = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=seg_RL.device)
    return torch.where(seen_RLL, zero, low).unsqueeze(1)


def _best_of(fn: Callable[[], Any], device: torch.device, rounds: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def probe(
    device: torch.device, dtype: torch.dtype, chosen: str = "auto"
) -> tuple[bool, float, str]:
    """(whether batches may share here, the masked attention's cost against causal attention
    for the per-batch rule, why). The masked kernel must agree with causal attention run on
    each member alone; ``auto`` (``chosen``, the mode) also times both on a 4-head 512-token
    attention."""
    if chosen not in MODES:
        raise ValueError(f"shared-prefix mode {chosen!r}: use one of {', '.join(MODES)}")
    if chosen == "off":
        return False, 1.0, f"{SHARED_ENV}=off"
    gen = torch.Generator().manual_seed(0)
    prefix, sizes = 5, (3, 4)
    q_HLD = torch.randn(2, 12, 16, generator=gen).to(device=device, dtype=dtype)
    k_HLD, v_HLD = (torch.randn(2, 12, 16, generator=gen).to(device, dtype) for _ in "kv")
    seg_L = torch.tensor([0] * prefix + [1] * sizes[0] + [2] * sizes[1], device=device)
    got_HLD = F.scaled_dot_product_attention(q_HLD, k_HLD, v_HLD, _block_mask(seg_L, dtype)[0])
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for member, (start, size) in enumerate(((prefix, sizes[0]), (prefix + sizes[0], sizes[1]))):
        keep = list(range(prefix)) + list(range(start, start + size))
        want_HLD = F.scaled_dot_product_attention(
            q_HLD[:, keep], k_HLD[:, keep], v_HLD[:, keep], is_causal=True
        )
        if not torch.allclose(got_HLD[:, keep].float(), want_HLD.float(), rtol=tol, atol=tol):
            return False, 1.0, f"masked attention disagrees with causal attention (member {member})"
    if chosen == "on":
        return True, 1.0, f"{SHARED_ENV}=on"
    big_HLD = torch.randn(1, 4, 512, 64, generator=gen).to(device=device, dtype=dtype)
    mask = _block_mask(torch.zeros(512, dtype=torch.long, device=device), dtype)
    causal = _best_of(
        lambda: F.scaled_dot_product_attention(big_HLD, big_HLD, big_HLD, is_causal=True), device
    )
    masked = _best_of(
        lambda: F.scaled_dot_product_attention(big_HLD, big_HLD, big_HLD, mask), device
    )
    factor = round(masked / max(causal, 1e-9), 2)
    return True, factor, f"masked attention {factor:.2f}x causal on the probe"


def decision(
    device: torch.device, dtype: torch.dtype, mode: str = "auto"
) -> tuple[bool, float, str]:
    """:func:`probe`'s answer for ``device`` and ``dtype`` under ``mode``
    (``EngineOptions.shared_prefix``), decided once per process and mode, and logged."""
    key = (mode, device.type, dtype)
    found = _decisions.get(key)
    if found is None:
        with _lock:
            found = _decisions.get(key)
            if found is None:
                found = probe(device, dtype, mode)
                use, _, why = found
                _log.info(
                    "shared prefixes on %s: %s (%s)", device.type, "on" if use else "off", why
                )
                _decisions[key] = found
    return found


def reset() -> None:
    """Forget every decision, so the next batch probes again (tests)."""
    with _lock:
        _decisions.clear()


@dataclass(frozen=True)
class Plan:
    """A batch's packed layout: its groups, each group's packed row length, and the model's
    dtype (the attention mask's)."""

    groups: tuple[Group, ...]
    lengths: tuple[int, ...]
    row_lengths: tuple[int, ...]
    dtype: torch.dtype


def plan(
    keys: Sequence[Sequence[Any]],
    device: torch.device,
    dtype: torch.dtype,
    shape: tuple[int, int, int],
    mode: str = "auto",
) -> Plan | None:
    """The packed plan of datums with per-position ``keys`` (token ids, or (token,
    temperature) pairs), or ``None`` to run them unshared: sharing is off here (``mode``),
    no two datums share a prefix, or the per-batch rule says packing costs too much.
    ``shape``: the model's (non-embedding parameters, layers, hidden width)."""
    if len(keys) < 2:
        return None
    use, factor, _ = decision(device, dtype, mode)
    if not use:
        return None
    lengths = [len(k) for k in keys]
    groups = prefix_groups.group_by_prefix(keys, max(MAX_ROW_TOKENS, max(lengths)))
    if all(len(g.members) == 1 for g in groups):
        return None
    if mode == "auto" and not prefix_groups.sharing_pays(groups, lengths, shape, factor):
        return None
    rows = prefix_groups.row_lengths(groups, lengths)
    return Plan(tuple(groups), tuple(lengths), tuple(rows), dtype)


@dataclass
class Packed:
    """The index tensors of one packed forward over ``groups``."""

    src_N: torch.Tensor  # long [R*L]: the flat datum position each packed position reads
    seg_RL: torch.Tensor  # long: 0 prefix, k + 1 member k's suffix, -1 padding
    pos_RL: torch.Tensor  # long: each packed position's position id
    dest_BT: torch.Tensor  # long: the packed position each datum position reads (0: padding)


def pack(
    groups: Sequence[Group], lengths: Sequence[int], width: int, device: torch.device
) -> Packed:
    """The layout of ``groups`` over datums of ``lengths`` (padded to ``width`` in the batch)."""
    rows = prefix_groups.row_lengths(groups, lengths)
    row_width = max(rows)
    n = len(groups) * row_width
    src, seg, pos = [0] * n, [-1] * n, [0] * n
    dest = [0] * (len(lengths) * width)
    for r, group in enumerate(groups):
        p, base = group.prefix, r * row_width
        sizes = [lengths[i] for i in group.members]
        first = group.members[0]
        for t in range(p):  # the prefix, read from the first member
            src[base + t], seg[base + t], pos[base + t] = first * width + t, 0, t
        starts = prefix_groups.suffix_starts(p, sizes)
        for k, (i, start) in enumerate(zip(group.members, starts, strict=True)):
            for t in range(p):
                dest[i * width + t] = base + t
            for t in range(p, lengths[i]):
                col = base + start + t - p
                src[col], seg[col], pos[col] = i * width + t, k + 1, t
                dest[i * width + t] = col

    def longs(values: list[int], *shape: int) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device).view(*shape)

    return Packed(
        src_N=longs(src, n),
        seg_RL=longs(seg, len(groups), row_width),
        pos_RL=longs(pos, len(groups), row_width),
        dest_BT=longs(dest, len(lengths), width),
    )


def packed_logprobs(
    model: Any,
    groups: Sequence[Group],
    lengths: Sequence[int],
    tokens_BT: torch.Tensor,
    targets_BT: torch.Tensor,
    temperature_BT: torch.Tensor | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Each datum's log softmax(logits / temperature)[target] per position, from one packed
    forward over ``groups`` (module docstring), in float32. -> ``[B, T]`` (padding: any value).
    ``groups`` cover rows of ``tokens_BT`` by index; members must share their first
    ``prefix`` tokens (and temperatures)."""
    width = tokens_BT.shape[1]
    packed = pack(groups, lengths, width, tokens_BT.device)
    rows, row_width = packed.seg_RL.shape
    ids_RL = tokens_BT.reshape(-1)[packed.src_N].view(rows, row_width)
    mask_R1LL = _block_mask(packed.seg_RL, dtype)
    inputs = {"input_ids": ids_RL, "attention_mask": mask_R1LL, "position_ids": packed.pos_RL}
    tau_N = None  # members agree on the prefix's temperatures (the keys)
    if temperature_BT is not None:
        tau_N = temperature_BT.to(torch.float32).reshape(-1)[packed.src_N]
    pos_M, tok_M = packed.dest_BT.reshape(-1), targets_BT.reshape(-1)
    return target_logprobs(model, inputs, tok_M, tau_N, pos_M).view(targets_BT.shape)


def supported(model: Any) -> bool:
    """Whether ``model`` takes a packed row as it is written: its attention is ``sdpa`` or
    ``eager`` (both read a 4-D additive mask as given; flash attention takes none) and has no
    sliding window (a custom mask would replace it)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    masks_as_given = getattr(config, "_attn_implementation", None) in ("sdpa", "eager")
    window = getattr(config, "sliding_window", None)
    unwindowed = not window or getattr(config, "use_sliding_window", True) is False
    return masks_as_given and unwindowed


def batch_plan(batch: Batch, loaded: LoadedModel, shape: tuple[int, int, int]) -> Plan | None:
    """:func:`plan` of a training batch on ``loaded``'s model: its datums' tokens, paired with
    their temperatures when the batch gives any (a shared position must read the same
    temperature). ``None`` for a model that is not :func:`supported`."""
    mode = loaded.options.shared_prefix
    if len(batch.lengths) < 2 or mode == "off" or not supported(loaded.model):
        return None
    device, dtype = loaded.device, loaded.dtype
    token_rows = batch.tokens_BT.tolist()
    if batch.temperature_BT is None:
        keys: list[list[Any]] = [row[:n] for row, n in zip(token_rows, batch.lengths, strict=True)]
    else:
        temps = batch.temperature_BT.tolist()
        keys = [
            list(zip(row[:n], tau[:n], strict=True))
            for row, tau, n in zip(token_rows, temps, batch.lengths, strict=True)
        ]
    return plan(keys, device, dtype, shape, mode)


def chunked(
    groups: Sequence[Group], lengths: Sequence[int], fits: Callable[[int, int], bool]
) -> list[list[Group]]:
    """``groups`` in runs that each make one forward: longest packed row first, a run grown
    while ``fits(rows, widest row)`` holds (a run always takes at least one group)."""
    rows = prefix_groups.row_lengths(groups, lengths)
    order = sorted(range(len(groups)), key=lambda g: -rows[g])
    runs: list[list[int]] = []
    for g in order:  # a run's first group is its widest
        if runs and fits(len(runs[-1]) + 1, rows[runs[-1][0]]):
            runs[-1].append(g)
        else:
            runs.append([g])
    return [[groups[g] for g in run] for run in runs]


def batch_logprobs(
    model: Any, prompts: Sequence[list[int]], loaded: LoadedModel, shape: tuple[int, int, int]
) -> list[list[float]]:
    """``scoring.batch_logprobs`` (log p(tokens[i] | tokens[:i]) at T = 1 for i >= 1) of
    ``model`` (``loaded``'s, or a plain copy of it), with prompts that share a prefix packed
    (module docstring) in runs of at most ``LOGPROB_LOGIT_BYTES`` of float32 logits;
    unshared when :func:`plan` says so. ``shape``: as for :func:`plan`."""
    pad_id, vocab_size = loaded.pad_id, loaded.vocab_size
    device, dtype = loaded.device, loaded.dtype
    inputs = [p[:-1] for p in prompts]
    index = [i for i, p in enumerate(inputs) if p]  # a one-token prompt has no logprobs
    found = None
    mode = loaded.options.shared_prefix
    if mode != "off" and supported(model):
        found = plan([inputs[i] for i in index], device, dtype, shape, mode)
    if found is None:
        return scoring.batch_logprobs(model, prompts, pad_id, vocab_size, device)
    out: list[list[float]] = [[] for _ in prompts]

    def fits(rows: int, width: int) -> bool:
        return rows * width * vocab_size * 4 <= scoring.LOGPROB_LOGIT_BYTES

    for run in chunked(found.groups, found.lengths, fits):
        members = [index[i] for g in run for i in g.members]  # prompt indices
        local = {i: k for k, i in enumerate(g_i for g in run for g_i in g.members)}
        groups = [Group(tuple(local[i] for i in g.members), g.prefix) for g in run]
        lengths = [len(inputs[i]) for i in members]
        width = max(lengths)
        ids_BT = torch.tensor([inputs[i] + [pad_id] * (width - len(inputs[i])) for i in members])
        targets_BT = torch.tensor(
            [prompts[i][1:] + [0] * (width - len(inputs[i])) for i in members]
        )
        lp_BT = packed_logprobs(
            model, groups, lengths, ids_BT.to(device), targets_BT.to(device), None, dtype
        )
        for i, n, row in zip(members, lengths, lp_BT.tolist(), strict=True):
            out[i] = row[:n]
    return out
