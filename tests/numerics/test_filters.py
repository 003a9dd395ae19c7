"""The pure sampling filters and the inverse-CDF draw, against closed-form values."""

from __future__ import annotations

import math

import pytest
import torch

from localsession.engine.sampling import (
    apply_temperature,
    filter_logits,
    sample_from_logits,
    top_k_filter,
    top_p_filter,
)
from localsession.numerics import filters

INF = float("inf")


def logp(probs: list[float]) -> torch.Tensor:
    return torch.log(torch.tensor([probs], dtype=torch.float32))


def kept(logits_SV: torch.Tensor) -> list[list[int]]:
    return [[i for i, v in enumerate(row) if v != -INF] for row in logits_SV.tolist()]


def test_temperature_scales_rows_and_leaves_greedy_rows() -> None:
    logits = torch.tensor([[2.0, 4.0], [2.0, 4.0], [2.0, 4.0]])
    out = apply_temperature(logits, torch.tensor([0.5, 2.0, 0.0]))
    torch.testing.assert_close(out, torch.tensor([[4.0, 8.0], [1.0, 2.0], [2.0, 4.0]]))
    mixed = apply_temperature(logits, torch.tensor([1.0, 0.5, 0.0]))
    torch.testing.assert_close(mixed, torch.tensor([[2.0, 4.0], [4.0, 8.0], [2.0, 4.0]]))


def test_temperatures_of_one_and_zero_leave_the_logits_as_they_are() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    out = apply_temperature(logits, torch.tensor([1.0, 0.0, 1.0]))
    assert out is logits  # no pass over them
    assert torch.equal(out, logits / 1.0)


def test_top_k_keeps_k_largest_per_row() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]] * 4)
    out = top_k_filter(logits, torch.tensor([2, 1, -1, 4]))
    assert kept(out) == [[1, 2], [1], [0, 1, 2, 3], [0, 1, 2, 3]]
    torch.testing.assert_close(out[0, [1, 2]], torch.tensor([3.0, 2.0]))  # values untouched


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    logits = logp([0.5, 0.3, 0.2]).repeat(5, 1)
    out = top_p_filter(logits, torch.tensor([0.6, 0.5, 0.81, 1.0, 1e-6]))
    # mass before each token: 0, 0.5, 0.8 -> kept while below p
    assert kept(out) == [[0, 1], [0], [0, 1, 2], [0, 1, 2], [0]]


def test_top_p_order_independent_of_token_position() -> None:
    logits = logp([0.2, 0.5, 0.3])
    assert kept(top_p_filter(logits, torch.tensor([0.6]))) == [[1, 2]]


def test_filter_applies_top_p_after_top_k_renormalisation() -> None:
    logits = logp([0.4, 0.3, 0.2, 0.1])
    # top_p alone at 0.5: mass before token 1 is 0.4 < 0.5 -> two tokens
    assert kept(
        filter_logits(logits, torch.tensor([1.0]), torch.tensor([-1]), torch.tensor([0.5]))
    ) == [[0, 1]]
    # top_k = 2 first renormalises to [4/7, 3/7]; mass before token 1 is 4/7 >= 0.5 -> one
    assert kept(
        filter_logits(logits, torch.tensor([1.0]), torch.tensor([2]), torch.tensor([0.5]))
    ) == [[0]]


def test_filter_temperature_changes_nucleus() -> None:
    logits = logp([0.6, 0.3, 0.1])
    # T = 0.5 squares the probabilities: [0.36, 0.09, 0.01] / 0.46 -> top token 0.78 >= 0.7
    out = filter_logits(logits, torch.tensor([0.5]), torch.tensor([-1]), torch.tensor([0.7]))
    assert kept(out) == [[0]]
    out = filter_logits(logits, torch.tensor([1.0]), torch.tensor([-1]), torch.tensor([0.7]))
    assert kept(out) == [[0, 1]]


def test_inverse_cdf_draw() -> None:
    logits = logp([0.5, 0.3, 0.2]).repeat(4, 1)
    u = torch.tensor([0.1, 0.55, 0.85, 0.0])
    assert sample_from_logits(logits, u).tolist() == [0, 1, 2, 0]


def test_inverse_cdf_never_picks_filtered_tokens() -> None:
    logits = torch.tensor([[math.log(0.5), -INF, math.log(0.5)], [-INF, 0.0, -INF]])
    u = torch.tensor([0.5, 0.0])
    assert sample_from_logits(logits, u).tolist() == [2, 1]
    u = torch.tensor([0.999999, 0.999999])
    assert sample_from_logits(logits, u).tolist() == [2, 1]


def test_inverse_cdf_frequencies_match_probabilities() -> None:
    logits = logp([0.5, 0.3, 0.2]).repeat(20000, 1)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(sample_from_logits(logits, u), minlength=3).float() / 20000
    torch.testing.assert_close(counts, torch.tensor([0.5, 0.3, 0.2]), atol=0.02, rtol=0)


@pytest.mark.parametrize("selected", [True, False], ids=["topk", "sorted"])
def test_top_k_against_a_per_row_reference(selected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of keeping the k largest (a ``topk`` selection on a CPU, a full sort where
    the step may not read k on the host) against each row's own ranking in Python."""
    if not selected:  # as under torch.compile or in a captured CUDA step
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    gen = torch.Generator().manual_seed(4)
    vocab = 40
    logits = torch.randn(7, vocab, generator=gen)
    k = torch.tensor([1, 7, 0, -1, vocab, vocab - 1, 3])
    out = top_k_filter(logits, k, synced=False)
    for row, kk in zip(range(7), k.tolist(), strict=True):
        values = logits[row].tolist()
        if kk <= 0 or kk >= vocab:
            assert out[row].tolist() == values
            continue
        kept = sorted(range(vocab), key=lambda i: -values[i])[:kk]
        want = [values[i] if i in kept else float("-inf") for i in range(vocab)]
        assert out[row].tolist() == want
    assert torch.equal(top_k_filter(logits, torch.zeros(7, dtype=torch.long), synced=False), logits)


def test_top_p_from_a_prefix_equals_sorting_whole_rows() -> None:
    """The CPU way (the nucleus among each row's TOP_P_PREFIX largest logits, whole-row sort
    only for rows whose nucleus runs past them) keeps what sorting every row keeps: peaked
    rows (no sort at all), a flat row (sorted alone), an inactive row (unchanged)."""
    gen = torch.Generator().manual_seed(9)
    vocab = 3 * filters.TOP_P_PREFIX
    logits = torch.randn(4, vocab, generator=gen) * 4
    p = torch.tensor([0.9, 0.5, 1.0, 0.95])
    with torch.profiler.profile() as prof:
        got = top_p_filter(logits, p, synced=False)
    assert "aten::sort" not in {event.name for event in prof.events()}
    want = filters._nucleus_by_sort(logits, p.unsqueeze(-1), (p < 1).unsqueeze(-1))
    assert torch.equal(got, want)
    assert torch.equal(got[2], logits[2]) and 1 < int(got[0].isfinite().sum()) < vocab
    logits[3] = torch.randn(vocab, generator=gen) * 0.1  # flat: its nucleus passes the prefix
    with torch.profiler.profile() as prof:
        got = top_p_filter(logits, p, synced=False)
    assert "aten::sort" in {event.name for event in prof.events()}
    want = filters._nucleus_by_sort(logits, p.unsqueeze(-1), (p < 1).unsqueeze(-1))
    assert torch.equal(got, want)
    assert int(got[3].isfinite().sum()) > filters.TOP_P_PREFIX


def _first_max(row: list[float]) -> int:
    """The index torch's argmax documents: the first NaN, else the first largest value."""
    for i, value in enumerate(row):
        if math.isnan(value):
            return i
    return max(range(len(row)), key=lambda i: (row[i], -i))


@pytest.mark.parametrize("vocab", [300, 3 * filters.ARGMAX_BLOCK, 3 * filters.ARGMAX_BLOCK + 57])
def test_row_argmax_is_the_first_largest_value(vocab: int) -> None:
    block = filters.ARGMAX_BLOCK
    gen = torch.Generator().manual_seed(5)
    logits_SV = torch.randn(9, vocab, generator=gen)
    top = 100.0
    logits_SV[1, [2 * block + 3 if vocab > 2 * block else 7, 5]] = top  # tie: the earlier one
    logits_SV[2, [min(block + 9, vocab - 2), vocab - 1]] = top  # a block and the tail tie
    logits_SV[3, vocab - 2] = top  # largest in the tail (or the last block)
    logits_SV[4, [vocab - 3, 11]] = float("nan")  # the first NaN wins, before any number
    logits_SV[5, vocab - 3] = float("nan")
    logits_SV[5, 0] = top
    logits_SV[6] = float("-inf")  # nothing larger than the first
    logits_SV[7, :] = 1.0
    edge = min(block, vocab - 1)
    logits_SV[8, [edge, edge - 1]] = top  # on both sides of a block's end
    got_S = filters.row_argmax(logits_SV)
    assert got_S.tolist() == [_first_max(row) for row in logits_SV.tolist()]
    assert torch.equal(got_S, logits_SV.argmax(dim=-1))
    # a row's view into a wider buffer (the step's logits are a slice) reads the same
    wide_SW = torch.randn(9, vocab + 5, generator=gen)
    wide_SW[:, :vocab] = logits_SV
    assert torch.equal(filters.row_argmax(wide_SW[:, :vocab]), got_S)
    assert torch.equal(filters.row_argmax(logits_SV.t().contiguous().t()), got_S)  # columns
