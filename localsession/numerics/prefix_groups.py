"""Which datums of a batch share a token prefix, and whether computing it once pays (torch-free).

The torch engine's shared-prefix path (engine/shared_prefix.py) packs each group of datums
that start with the same tokens into one row: the prefix once, then every member's own
suffix, each suffix seeing the prefix and itself only. This module decides the groups and
the row layout from plain lists:

- :func:`group_by_prefix`: datums sorted by their keys (token ids, or (token, temperature)
  pairs: a shared position must also share its temperature), runs of neighbours merged while
  the run's common prefix times its size does not shrink, a run cut where its packed row would
  pass ``max_row`` or where the next datum shares more with the one after it than with the
  run (any more, if joining would shorten the run's prefix; twice as much otherwise); a group
  that saves less than :data:`MIN_GROUP_SAVING` of its tokens is split back into single
  datums.
- :func:`packed_length` and :func:`suffix_starts`: the packed row's length and where each
  member's suffix begins in it.
- :func:`sharing_pays`: the per-batch rule. The padded cost of the packed rows (one forward
  over ``rows × widest packed row``) against the unshared batch's (``datums × widest datum``),
  by the dense-transformer count of engine/flops.py, with the masked attention weighed by the
  probe's factor; the batch is shared when that ratio is at most :data:`MAX_COST_RATIO`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: A group must save at least this fraction of its members' tokens, else it is split up.
MIN_GROUP_SAVING = 0.25
#: A batch is shared when its packed cost is at most this fraction of the unshared cost.
MAX_COST_RATIO = 0.8


@dataclass(frozen=True)
class Group:
    """Datums ``members`` (batch indices) whose first ``prefix`` keys are equal."""

    members: tuple[int, ...]
    prefix: int


def common_prefix(a: Sequence[Hashable], b: Sequence[Hashable], limit: int | None = None) -> int:
    """How many leading items ``a`` and ``b`` share (at most ``limit``)."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def packed_length(prefix: int, lengths: Sequence[int]) -> int:
    """Tokens in the packed row of a group: the prefix once plus every member's suffix."""
    return prefix + sum(n - prefix for n in lengths)


def suffix_starts(prefix: int, lengths: Sequence[int]) -> list[int]:
    """Where each member's suffix begins in its group's packed row (the prefix comes first)."""
    starts, at = [], prefix
    for n in lengths:
        starts.append(at)
        at += n - prefix
    return starts


def _worth_keeping(group: Group, lengths: Sequence[int]) -> bool:
    total = sum(lengths[i] for i in group.members)
    saved = (len(group.members) - 1) * group.prefix
    return len(group.members) > 1 and saved >= MIN_GROUP_SAVING * total


def group_by_prefix(keys: Sequence[Sequence[Hashable]], max_row: int) -> list[Group]:
    """Groups covering every datum once, in the order of their sorted keys (module docstring).
    ``keys[i]`` is datum i's per-position key; a group's packed row stays within ``max_row``
    tokens unless a single datum is longer."""
    order = sorted(range(len(keys)), key=lambda i: tuple(keys[i]))
    lengths = [len(k) for k in keys]
    groups: list[Group] = []
    members: list[int] = []
    prefix = 0
    for at, i in enumerate(order):
        if members:
            shared = common_prefix(keys[members[0]], keys[i], prefix)
            grown = packed_length(shared, [lengths[j] for j in members]) + lengths[i] - shared
            nxt = order[at + 1] if at + 1 < len(order) else None
            # a datum that shares more with the next one than with this run starts its own:
            # when joining would shorten the run's prefix, or when the next one shares at least
            # twice as much (a run of one short datum [9] must not hold the prompt [9, 1, ...])
            ahead = 0 if nxt is None else common_prefix(keys[i], keys[nxt], 2 * shared)
            leaves = ahead > shared and (shared < prefix or ahead >= 2 * shared)
            if shared > 0 and len(members) * shared >= (len(members) - 1) * prefix:
                if grown <= max_row and not leaves:
                    members.append(i)
                    prefix = shared
                    continue
            groups.append(Group(tuple(members), prefix))
        members, prefix = [i], lengths[i]
    if members:
        groups.append(Group(tuple(members), prefix))
    out: list[Group] = []
    for group in groups:
        if _worth_keeping(group, lengths):
            out.append(group)
        else:
            out.extend(Group((i,), lengths[i]) for i in group.members)
    return out


def row_lengths(groups: Sequence[Group], lengths: Sequence[int]) -> list[int]:
    """Each group's packed row length."""
    return [packed_length(g.prefix, [lengths[i] for i in g.members]) for g in groups]


def padded_cost(rows: int, width: int, params: int, layers: int, hidden: int, attn: float) -> float:
    """Forward FLOPs of ``rows`` padded rows of ``width`` tokens (engine/flops.py's count),
    the attention term weighed by ``attn``."""
    return rows * (2.0 * params * width + attn * 4.0 * layers * hidden * width * width)


def sharing_pays(
    groups: Sequence[Group],
    lengths: Sequence[int],
    shape: tuple[int, int, int],
    attn_factor: float,
) -> bool:
    """Whether the packed rows cost at most :data:`MAX_COST_RATIO` of the unshared batch.
    ``shape``: (non-embedding parameters, layers, hidden width); ``attn_factor``: the masked
    attention's cost against the causal one's (the probe's figure)."""
    if all(len(g.members) == 1 for g in groups):
        return False
    params, layers, hidden = shape
    packed = row_lengths(groups, lengths)
    shared = padded_cost(len(packed), max(packed), params, layers, hidden, attn_factor)
    unshared = padded_cost(len(lengths), max(lengths), params, layers, hidden, 1.0)
    return shared <= MAX_COST_RATIO * unshared
