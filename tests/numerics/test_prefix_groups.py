"""The shared-prefix grouping and the per-batch rule (numerics/prefix_groups.py), on plain lists:
groups against a brute-force common prefix, the packed layout in closed form, the cost rule
on hand-sized batches."""

from __future__ import annotations

import os.path
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from localsession.numerics import prefix_groups as pg
from localsession.numerics.prefix_groups import Group

SHAPE = (1_000_000, 4, 256)  # parameters, layers, width: a small model's


def grpo_keys(prompts: int, group: int, prompt_len: int, seed: int) -> list[list[int]]:
    """``prompts`` distinct prompts of ``prompt_len`` tokens, each with ``group`` completions
    of 1-8 tokens, shuffled."""
    rng = random.Random(seed)
    out = []
    for p in range(prompts):
        prompt = [p + 1000] + [rng.randrange(50) for _ in range(prompt_len - 1)]
        out += [
            prompt + [rng.randrange(50, 100) for _ in range(rng.randint(1, 8))]
            for _ in range(group)
        ]
    rng.shuffle(out)
    return out


def test_common_prefix() -> None:
    assert pg.common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert pg.common_prefix([1, 2], [1, 2, 4]) == 2
    assert pg.common_prefix([5], [1]) == 0
    assert pg.common_prefix([1, 2, 3], [1, 2, 3], limit=1) == 1
    assert pg.common_prefix([], [1]) == 0


def test_layout_in_closed_form() -> None:
    assert pg.packed_length(4, [6, 4, 9]) == 4 + 2 + 0 + 5
    assert pg.suffix_starts(4, [6, 4, 9]) == [4, 6, 6]
    groups = [Group((0, 2), 3), Group((1,), 5)]
    assert pg.row_lengths(groups, [4, 5, 7]) == [3 + 1 + 4, 5]


def test_grpo_batch_groups_by_prompt() -> None:
    keys = grpo_keys(prompts=3, group=8, prompt_len=20, seed=0)
    groups = pg.group_by_prefix(keys, max_row=4096)
    assert len(groups) == 3
    for g in groups:
        members = [keys[i] for i in g.members]
        assert len(members) == 8
        assert len({tuple(k[:20]) for k in members}) == 1  # one prompt per group
        assert g.prefix == len(os.path.commonprefix(members))  # the whole common prefix
    assert pg.sharing_pays(groups, [len(k) for k in keys], SHAPE, attn_factor=1.0)


def test_a_datum_sharing_one_token_does_not_swallow_a_group() -> None:
    """[9, 0] sorts just before eight datums that share [9, 1, ..., 6]: they still group."""
    keys = [[9, 0]] + [[9, 1, 2, 3, 4, 5, 6, 50 + i] for i in range(8)]
    groups = pg.group_by_prefix(keys, max_row=4096)
    assert sorted(g.members for g in groups) == [(0,), tuple(range(1, 9))]
    assert [g.prefix for g in groups if len(g.members) > 1] == [7]


def test_a_datum_that_starts_the_prompt_does_not_hold_its_group() -> None:
    """[9] sorts first and shares its one token with every datum after it; two copies of it
    are a group of their own, and the eight that share [9, 1, ..., 6] still group."""
    prompt = [9, 1, 2, 3, 4, 5, 6]
    for short in ([[9]], [[9], [9]]):
        keys = short + [prompt + [50 + i] for i in range(8)]
        groups = pg.group_by_prefix(keys, max_row=4096)
        first = tuple(range(len(short)))
        rest = tuple(range(len(short), len(keys)))
        assert sorted(g.members for g in groups) == [first, rest]
        assert {g.members: g.prefix for g in groups}[rest] == 7


def test_long_rows_split_at_max_row() -> None:
    keys = grpo_keys(prompts=1, group=10, prompt_len=30, seed=1)
    groups = pg.group_by_prefix(keys, max_row=60)
    lengths = [len(k) for k in keys]
    assert len(groups) > 1
    assert all(n <= 60 for n in pg.row_lengths(groups, lengths))
    assert sorted(i for g in groups for i in g.members) == list(range(10))


def test_a_group_that_saves_little_is_split_up() -> None:
    """Only the first token in common (a BOS): every datum runs alone, and the batch unshared."""
    keys = [[1] + [i] * 20 for i in range(2, 8)]
    groups = pg.group_by_prefix(keys, max_row=4096)
    assert all(len(g.members) == 1 for g in groups)
    assert [g.prefix for g in groups] == [21] * 6
    assert not pg.sharing_pays(groups, [21] * 6, SHAPE, attn_factor=1.0)


def test_the_cost_rule_weighs_padding_and_attention() -> None:
    # two datums of 100 tokens sharing 60: one row of 140 against two of 100
    groups = [Group((0, 1), 60)]
    params, layers, width = SHAPE
    shared = 140 * (2 * params + 4 * layers * width * 140)
    unshared = 2 * 100 * (2 * params + 4 * layers * width * 100)
    assert shared <= pg.MAX_COST_RATIO * unshared
    assert pg.sharing_pays(groups, [100, 100], SHAPE, attn_factor=1.0)
    # a masked attention this costly turns it down: 140² · 4·L·d · f > 0.8 · unshared
    assert not pg.sharing_pays(groups, [100, 100], SHAPE, attn_factor=40.0)
    # a long packed row pads the short rows beside it past the saving: 5 rows of 370
    # tokens against 8 of 100
    four = Group((0, 1, 2, 3), 10)
    singles = [Group((i,), 20) for i in range(4, 8)]
    assert not pg.sharing_pays([four, *singles], [100] * 4 + [20] * 4, SHAPE, attn_factor=1.0)


keys_strategy = st.lists(
    st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=24
)


@settings(max_examples=200, deadline=None)
@given(keys=keys_strategy, max_row=st.integers(1, 40))
def test_groups_cover_every_datum_once_with_a_true_prefix(
    keys: list[list[int]], max_row: int
) -> None:
    groups = pg.group_by_prefix(keys, max_row=max_row)
    assert sorted(i for g in groups for i in g.members) == list(range(len(keys)))
    lengths = [len(k) for k in keys]
    for g, row in zip(groups, pg.row_lengths(groups, lengths), strict=True):
        members = [keys[i] for i in g.members]
        assert g.prefix <= len(os.path.commonprefix(members))
        if len(members) > 1:
            assert g.prefix > 0
            assert row <= max_row
            saved = (len(members) - 1) * g.prefix
            assert saved >= pg.MIN_GROUP_SAVING * sum(map(len, members))
        else:
            assert g.prefix == len(members[0])
