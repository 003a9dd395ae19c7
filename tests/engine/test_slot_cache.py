"""The static decoder's parts: bucket padding, column sizing, slot moves, the compile/graph
cache keys (a CPU dry run of the CUDA path's bookkeeping), per-row state and the KV slots
being freed when a batch's last stream ends."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from localsession.engine import decode_step, slot_cache
from localsession.engine.builtin import EOS_ID, PAD_ID
from localsession.engine.decode_step import StepFlags, StepKey, StepRunner
from localsession.engine.row_state import ROW_FIELDS, RowState
from localsession.engine.sampling import BatchSampler, add_step_hook
from localsession.engine.slot_cache import SlotCache, bucket_for, columns_for, mask_for
from localsession.engine.streams import SampledStream, seeded_generator
from localsession.numerics.filters import top_k_filter, top_p_filter
from localsession.port import SampleRequest

FLAGS = StepFlags(sampled=True, greedy=False, top_k=False, top_p=False, top_logprobs=0)


def test_buckets_pad_to_the_next_power_of_two_then_multiples_of_256() -> None:
    assert [bucket_for(n) for n in (1, 2, 3, 4, 5, 9, 17, 100, 129, 256)] == [
        1, 2, 4, 4, 8, 16, 32, 128, 256, 256,
    ]  # fmt: skip
    assert [bucket_for(n) for n in (257, 512, 513)] == [512, 512, 768]
    with pytest.raises(ValueError, match="at least one row"):
        bucket_for(0)


def test_columns_cover_the_prompt_and_cap_the_reservation() -> None:
    assert columns_for(10, 30) == 64  # 30 positions, rounded up to the quantum
    assert columns_for(64, 65) == 128
    assert columns_for(100, 10_000) == 384  # 100 + FIRST_ROOM (256) = 356 -> 384


def _pairs(
    rows: int, heads: int, width: int, dim: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(rows, heads, width, dim, generator=gen),
            torch.randn(rows, heads, width, dim, generator=gen),
        )
        for _ in range(2)
    ]


def test_slots_load_left_padded_rows_write_in_place_keep_and_grow() -> None:
    prefilled = _pairs(2, 3, 5, 4, seed=0)  # row 0: 5 real positions, row 1: the last 2
    cache = SlotCache(prefilled, rows=4, columns=8)
    cache.load([1, 2], prefilled, torch.tensor([5, 2]))
    for (keys, _), (k, _) in zip(cache.layers, prefilled, strict=True):
        torch.testing.assert_close(keys[1, :, :5], k[0], rtol=0, atol=0)
        torch.testing.assert_close(keys[2, :, :2], k[1, :, 3:], rtol=0, atol=0)
        assert keys[0].abs().sum() == 0 and keys[3].abs().sum() == 0
    # one step for rows 0..2, writing columns 7, 5, 2
    cache.active, cache.col_B = 3, torch.tensor([7, 5, 2])
    new_k = torch.randn(3, 3, 1, 4)
    k_all, _ = cache.update(new_k, new_k + 1, 0)
    assert k_all.shape == (3, 3, 8, 4)
    torch.testing.assert_close(k_all[1, :, 5], new_k[1, :, 0], rtol=0, atol=0)
    torch.testing.assert_close(k_all[2, :, :2], prefilled[0][0][1, :, 3:], rtol=0, atol=0)
    row2 = cache.layers[1][1][2].clone()
    cache.keep(torch.tensor([2, 1]))  # row 2 first, then row 1
    torch.testing.assert_close(cache.layers[1][1][0], row2, rtol=0, atol=0)
    generation = cache.generation
    cache.steps["a step"] = object()
    cache.grow(8, 16, used=2)
    assert (cache.rows, cache.columns) == (8, 16) and cache.layers[0][0].shape == (8, 3, 16, 4)
    torch.testing.assert_close(cache.layers[1][1][0, :, :8], row2, rtol=0, atol=0)
    assert cache.generation != generation and not cache.steps  # new buffers, new keys


def test_the_mask_lets_each_row_see_its_own_columns() -> None:
    cache = SlotCache(_pairs(1, 1, 1, 2, seed=1), rows=2, columns=4)
    pos_B = torch.tensor([0, 2])
    mask = mask_for(cache, pos_B, dtype=torch.float32)
    assert mask.shape == (2, 1, 1, 4)
    low = torch.finfo(torch.float32).min
    assert mask[:, 0, 0].tolist() == [[0.0, low, low, low], [0.0, 0.0, 0.0, low]]


def _stream(temperature: float, prompt_len: int, tokens: list[int]) -> SampledStream:
    s = SampledStream(0, 0, prompt_len, temperature, 3, 0.9, 10, (), seeded_generator(0))
    s.tokens = list(tokens)
    return s


def test_draws_put_back_come_again_in_order() -> None:
    """A window cut short gives its unused uniforms back: the stream's draws are then the
    seeded generator's sequence, as if they had never been taken."""
    s = _stream(1.0, 4, [])
    want = torch.rand(8, generator=seeded_generator(0)).tolist()
    taken = [s.next_uniform() for _ in range(5)]
    s.put_back(taken[2:])
    assert taken[:2] + [s.next_uniform() for _ in range(6)] == want


def test_row_state_moves_every_field_alike() -> None:
    state = RowState(4, torch.device("cpu"))
    state.write(0, [_stream(0.5, 4, [7]), _stream(0.0, 9, [1, 2])])
    assert state.view(2)["pos"].tolist() == [4, 10] and state.view(2)["ids"].tolist() == [7, 2]
    assert state.view(2)["last_pos"].tolist() == [13, 18]
    state.keep(torch.tensor([1]))
    assert {name: t[0].item() for name, t in state.tensors.items()} == pytest.approx(
        {"ids": 2, "pos": 10, "last_pos": 18, "temp": 0.0, "top_k": 3, "top_p": 0.9}
    )
    # the moved row's old slot pads again: no stale copy of it decodes on as padding
    assert state.tensors["pos"][1:].tolist() == [0, 0, 0]
    assert state.tensors["last_pos"][1:].tolist() == [0, 0, 0]
    assert state.tensors["top_p"][1:].tolist() == [1.0, 1.0, 1.0]
    state.grow(8)
    assert state.capacity == 8 and state.tensors["top_p"][4:].tolist() == [1.0] * 4
    assert set(state.tensors) == set(ROW_FIELDS)  # every field follows the same moves


def test_sync_free_filters_give_the_synced_values() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 50, generator=gen)
    for k in (torch.tensor([0, -1, 50]), torch.tensor([0, 5, 2])):
        torch.testing.assert_close(
            top_k_filter(logits, k), top_k_filter(logits, k, synced=False), rtol=0, atol=0
        )
    for p in (torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 0.5, 0.9])):
        torch.testing.assert_close(
            top_p_filter(logits, p), top_p_filter(logits, p, synced=False), rtol=0, atol=0
        )


@pytest.mark.parametrize(
    "flags",
    [
        FLAGS,
        StepFlags(sampled=True, greedy=True, top_k=True, top_p=True, top_logprobs=3),
        StepFlags(sampled=False, greedy=True, top_k=False, top_p=False, top_logprobs=2),
    ],
)
def test_the_step_buffers_give_the_same_picks_and_are_kept(flags: StepFlags) -> None:
    """choose() computing its [B, V] passes in kept buffers gives the fresh tensors' values
    bit for bit, reuses the buffers at the next step and drops them for another batch size."""
    gen = torch.Generator().manual_seed(11)
    work: decode_step.Work = {}
    kept: list[int] = []
    for batch in (4, 4, 2):
        logits = torch.randn(batch, 300, generator=gen) * 4
        rows = {
            "temp": torch.tensor([0.7, 0.0, 1.0, 1.3][:batch]),
            "top_k": torch.tensor([0, 5, 40, 0][:batch]),
            "top_p": torch.tensor([1.0, 0.9, 0.5, 0.95][:batch]),
        }
        u = torch.rand(batch, generator=gen)
        fresh = decode_step.choose(logits, rows, u, flags)
        reused = decode_step.choose(logits, rows, u, flags, work)
        for want, got in zip(fresh, reused, strict=True):
            assert torch.equal(want, got)
        assert {shape for _, shape in work} == {logits.shape}
        kept.append(work[("logprobs", logits.shape)].data_ptr())
    assert kept[0] == kept[1]  # the same buffer from step to step


def test_step_buffers_off_the_cpu_outlive_a_bucket_change() -> None:
    """A captured graph writes its bucket's buffers at every replay, so off the CPU (a meta
    tensor stands in for CUDA here) a buffer of the bucket a batch left is kept."""
    work: decode_step.Work = {}
    first = decode_step._buffer(work, "logprobs", torch.empty(4, 300, device="meta"))
    decode_step._buffer(work, "logprobs", torch.empty(2, 300, device="meta"))
    assert set(work) == {("logprobs", torch.Size([4, 300])), ("logprobs", torch.Size([2, 300]))}
    assert work[("logprobs", torch.Size([4, 300]))] is first


class _FakeGraph:
    """Stands in for a CUDA graph capture on the CPU: counts captures, replays eagerly."""

    made: list[Any] = []

    def __init__(self, step: Any) -> None:
        _FakeGraph.made.append(self)
        self.step = step

    def __call__(self) -> Any:
        return self.step()


def test_steps_are_made_once_per_key_and_dropped_with_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CUDA path's bookkeeping dry-run on the CPU: one capture per (bucket, columns,
    generation, flags) key, reused on the next call, gone when the cache grows."""
    monkeypatch.setattr(decode_step, "_Graphed", _FakeGraph)
    _FakeGraph.made = []
    runner = StepRunner("auto")
    assert runner.kind(torch.device("cuda")) == "graph"
    assert runner.kind(torch.device("cpu")) == "eager"
    assert StepRunner("off").kind(torch.device("cuda")) == "eager"
    assert StepRunner("on").kind(torch.device("cpu")) == "inductor"
    cache = SlotCache(_pairs(1, 1, 1, 2, seed=2), rows=4, columns=64)
    outputs = (torch.zeros(1),) * 4
    calls: list[int] = []

    def step() -> Any:
        calls.append(1)
        return outputs

    def key(bucket: int, flags: StepFlags = FLAGS) -> StepKey:
        return StepKey("cuda", bucket, cache.columns, cache.generation, flags)

    for bucket in (2, 2, 4, 2):
        runner.run(key(bucket), cache, step, {})
    # captured for 2 and 4 (each capture checked: one eager step and one replay), replayed
    assert len(_FakeGraph.made) == 2 and len(calls) == 4 + 2 * 2
    runner.run(key(2, StepFlags(True, True, True, False, 2)), cache, step, {})
    assert len(_FakeGraph.made) == 3  # other filters, another graph
    assert set(runner.kinds.values()) == {"graph"}
    cache.grow(8, 64, used=4)
    runner.run(key(2), cache, step, {})
    assert len(_FakeGraph.made) == 4  # new buffers: captured again


class _StaleGraph(_FakeGraph):
    """A capture that replays wrong: its tokens are the eager step's plus one."""

    def __call__(self) -> Any:
        ids, *rest = self.step()
        return (ids + 1, *rest)


def test_a_graph_that_does_not_reproduce_the_eager_step_is_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """check_replay compares a fresh capture with an eager step on the same rows: a faithful
    one decodes (the rows put back as they were), a wrong one falls back to eager for the
    process, logged."""
    decode_step.reset()
    cache = SlotCache(_pairs(1, 1, 1, 2, seed=5), rows=2, columns=64)
    rows = {"ids": torch.tensor([7, 9]), "pos": torch.tensor([3, 5])}

    def step() -> Any:
        rows["pos"] += 1  # as decode_step advances pos
        return rows["ids"] * 2, torch.tensor([-0.5, -1.5]), torch.zeros(2, 0), torch.zeros(2, 0)

    key = StepKey("cuda", 2, 64, cache.generation, FLAGS)
    monkeypatch.setattr(decode_step, "_Graphed", _FakeGraph)
    ids, *_ = StepRunner("auto").run(key, cache, step, rows)
    assert ids.tolist() == [14, 18] and rows["pos"].tolist() == [4, 6]  # checked, then one step
    monkeypatch.setattr(decode_step, "_Graphed", _StaleGraph)
    stale = StepRunner("auto")
    with caplog.at_level("WARNING", logger="localsession.engine.decode_step"):
        ids, *_ = stale.run(
            key, SlotCache(_pairs(1, 1, 1, 2, seed=5), rows=2, columns=64), step, rows
        )
    assert ids.tolist() == [14, 18] and list(stale.kinds.values()) == ["eager"]
    assert "differ from the eager step" in caplog.text
    assert stale.kind(torch.device("cuda")) == "eager"  # for the rest of the process
    decode_step.reset()


def test_the_slots_are_freed_when_the_batch_ends(tiny_base: tuple[Any, Any]) -> None:
    """One live SlotCache (holding bytes) while a batch decodes, none once it returned,
    without waiting for the garbage collector; likewise after a join grew it."""
    model, tokenizer = tiny_base
    sampler = BatchSampler(
        model, tokenizer, frozenset({EOS_ID}), PAD_ID, torch.device("cpu"), "static", "off"
    )
    seen: list[tuple[int, int]] = []

    def hook(step: int) -> None:
        seen.append((len(slot_cache.LIVE), sum(c.nbytes() for c in slot_cache.LIVE)))

    asked = 0

    def admit() -> list[SampleRequest]:
        nonlocal asked
        asked += 1
        return [SampleRequest(prompt=[257, 66], num_samples=3, max_tokens=4)] if asked == 2 else []

    assert len(slot_cache.LIVE) == 0
    remove = add_step_hook(hook)
    try:
        with torch.no_grad():
            out = sampler.run(
                [SampleRequest(prompt=[257, 65], max_tokens=6, stop_at_eos=False)], admit=admit
            )
    finally:
        remove()
    assert len(out) == 2 and len(out[0][0].tokens) == 6
    assert seen and all(count == 1 and held > 0 for count, held in seen)
    assert len(slot_cache.LIVE) == 0


def test_the_cpu_probe_decides_once_and_undoes_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """``probe`` on a CPU: the first key compiles and is probed (its steps' side effects on
    the rows undone), the choice holds for later keys; a compile that fails runs eager."""
    decode_step.reset()
    compiled: list[Any] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(fn) or fn)
    monkeypatch.setattr(
        decode_step, "cpu_probe", lambda eager, fast: (eager(), fast(), (True, "faster"))[2]
    )
    runner = StepRunner("probe")
    cache = SlotCache(_pairs(1, 1, 1, 2, seed=4), rows=2, columns=64)
    rows = {"pos": torch.tensor([3, 5])}

    def step() -> Any:
        rows["pos"] += 1  # as decode_step advances pos
        return (torch.zeros(1),) * 4

    runner.run(StepKey("cpu", 2, 64, cache.generation, FLAGS), cache, step, rows)
    assert rows["pos"].tolist() == [4, 6]  # the probe's two steps undone, the real one kept
    runner.run(StepKey("cpu", 1, 64, cache.generation, FLAGS), cache, step, rows)
    assert list(runner.kinds.values()) == ["inductor", "inductor"] and len(compiled) == 2
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("no C++ compiler"))
    )
    failing = StepRunner("on")
    failing.run(StepKey("cpu", 4, 64, cache.generation, FLAGS), cache, step, rows)
    assert list(failing.kinds.values()) == ["eager"]
    assert failing.kind(torch.device("cpu")) == "eager"  # for the rest of the process
    decode_step.reset()


class _FailingCapture:
    """A capture that fails after its warm-up steps ran (as a host sync inside it would)."""

    def __init__(self, step: Any) -> None:
        step()
        step()
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_failed_capture_or_compile_leaves_the_rows_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback to eager starts from the rows as the step found them: a capture whose
    warm-ups ran, or a compile that fails at its first call (as inductor does, lazily),
    advances them by the real step only."""
    cache = SlotCache(_pairs(1, 1, 1, 2, seed=6), rows=2, columns=64)
    rows = {"ids": torch.tensor([7, 9]), "pos": torch.tensor([3, 5])}

    def step() -> Any:
        rows["pos"] += 1  # as decode_step advances pos
        return rows["ids"] * 2, torch.tensor([-0.5, -1.5]), torch.zeros(2, 0), torch.zeros(2, 0)

    def lazily_failing(fn: Any, **kw: Any) -> Any:
        return lambda: (_ for _ in ()).throw(RuntimeError("inductor: no C++ compiler"))

    monkeypatch.setattr(decode_step, "_Graphed", _FailingCapture)
    monkeypatch.setattr(torch, "compile", lazily_failing)
    for device, mode in (("cuda", "auto"), ("cpu", "on")):
        decode_step.reset()
        runner = StepRunner(mode)
        before = rows["pos"].tolist()
        ids, *_ = runner.run(StepKey(device, 2, 64, cache.generation, FLAGS), cache, step, rows)
        assert ids.tolist() == [14, 18] and list(runner.kinds.values()) == ["eager"]
        assert rows["pos"].tolist() == [p + 1 for p in before]
    decode_step.reset()
