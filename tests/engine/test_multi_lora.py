"""Multi-adapter batches (issue 56 item 2): rows of one batch, each decoding with its own
LoRA over one shared base (engine/multi_lora.py, engine/mixed_sampling.py).

References are independent of the multi-adapter path: the peft model with the package's
adapter swapped in (``use_weights``, peft's own LoRA forward) for the layer maths, and the
same request sampled alone through the engine's ordinary one-adapter path (a merged copy)
for whole requests. Adapters are random (scale 0.1) so different packages give visibly
different tokens, which each test checks first: a mix-up of slots could not pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model

from localsession.engine import slot_cache
from localsession.engine.builtin import build_builtin
from localsession.engine.decode_common import add_step_hook
from localsession.engine.multi_lora import can_mix, group_rows
from localsession.engine.snapshots import use_weights
from localsession.engine.torch_engine import TorchEngine
from localsession.port import EngineSpec, SampleRequest
from localsession.port_results import SampleResult

from .conftest import OPTIONS, TINY

PROMPT = [257, *b"Once upon a time"]
OTHER = [257, *b"The cat"]


def _random_package(engine: TorchEngine, directory: Path, seed: int) -> str:
    """Save ``engine`` with its adapter set to random values (scale 0.1) as a package."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in engine.model.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    engine.save_package(str(directory), include_optimizer=False, merge_weights=False)
    return str(directory)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TorchEngine, list[str]]]:
    """An engine (rank 8, alpha 16) and four packages: three of its own rank, and one of
    rank 4, alpha 32 saved by another session (its own scale)."""
    root = tmp_path_factory.mktemp("multi_lora")
    engine = TorchEngine(EngineSpec(TINY, rank=8, alpha=16, seed=0, options=OPTIONS))
    other = TorchEngine(EngineSpec(TINY, rank=4, alpha=32, seed=1, options=OPTIONS))
    try:
        packages = [_random_package(engine, root / f"pkg{k}", seed=k) for k in range(3)]
        packages.append(_random_package(other, root / "rank4", seed=9))
        other.close()
        yield engine, packages
    finally:
        other.close()
        engine.close()


def assert_same(alone: SampleResult, mixed: SampleResult, temperature: float) -> None:
    """Same tokens; logprobs within 1e-5 on the model's own scale. A sampled logprob is of
    the tempered distribution, ``log_softmax(logits / T)``, in which the logits' rounding
    (merged ``(W + sBA) x`` against ``W x + s B (A x)``) counts 1/T times: so the bound is
    1e-5 / T below T = 1. At T = 0.7 a joiner's first logprob came 9.5e-6 from the merged
    copy's with every row multiplying all adapters (masked, the first version) and 1.05e-5
    with rows grouped by adapter; over 96 random rows at T = 0.7 the two versions' errors were
    alike: median 3.8e-6, at most 9.5e-6."""
    assert len(alone.sequences) == len(mixed.sequences)
    atol = 1e-5 / min(1.0, temperature) if temperature > 0 else 1e-5
    for a, b in zip(alone.sequences, mixed.sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0
        )


def assert_rows_as_peft(
    engine: TorchEngine, snapshots: list[Any], ids_SL: torch.Tensor, got_SLV: torch.Tensor
) -> None:
    """Row r of ``got_SLV`` equals ``ids_SL[r]`` run alone through the peft model with
    ``snapshots[r]`` swapped in (None: the base), within 1e-5 (float32)."""
    for row, snap in enumerate(snapshots):
        with torch.no_grad(), use_weights(engine.model, engine._adapter, snap):
            want_LV = engine.model(input_ids=ids_SL[row : row + 1]).logits[0]
        torch.testing.assert_close(got_SLV[row], want_LV, atol=1e-5, rtol=0)


def test_each_row_of_a_forward_gets_its_own_adapter(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    """The multi-adapter model's logits, rows of slots [1, 0, 2, 3, 1] in one forward, equal
    each row's prompt run alone through the peft model with its adapter (1e-5, float32)."""
    engine, packages = setup
    multi = engine._decoders.multi()
    weights = [packages[0], None, packages[1], packages[3], packages[0]]
    snapshots = [engine._snapshots.get(w) for w in weights]
    ids_SL = torch.tensor([PROMPT[:8], PROMPT[4:12], PROMPT[:8], PROMPT[2:10], PROMPT[6:14]])
    try:
        slots = [multi.slot(key, snap) for key, snap in snapshots]
        assert slots == [1, 0, 2, 3, 1] and multi.adapters == 3
        multi.set_rows(slots)
        with torch.no_grad():
            got_SLV = multi.model(input_ids=ids_SL).logits
    finally:
        multi.clear()
    assert_rows_as_peft(engine, [snap for _, snap in snapshots], ids_SL, got_SLV)
    base_LV = got_SLV[1]
    for row in (0, 2, 3):  # the adapters change the logits well past rounding
        assert (got_SLV[row] - base_LV).abs().max() > 0.1


def test_rows_in_equal_groups_in_slot_order_skip_the_gathers(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    """Slots [1, 1, 2, 2] (ranks 8 and 4, the latter zero-padded): the forward that reads the
    rows in place gives each row its own adapter's logits, as the peft model does (1e-5)."""
    engine, packages = setup
    snapshots = [engine._snapshots.get(w) for w in (packages[0], packages[3])]
    ids_SL = torch.tensor([PROMPT[:8], PROMPT[4:12], PROMPT[2:10], PROMPT[6:14]])
    multi = engine._decoders.multi()
    try:
        slots = [multi.slot(*snapshots[0]), multi.slot(*snapshots[1])]
        multi.set_rows([slots[0]] * 2 + [slots[1]] * 2)
        groups = multi._rows.groups
        assert groups is not None and groups.index_GM is None and groups.back_S is None
        with torch.no_grad():
            got_SLV = multi.model(input_ids=ids_SL).logits
    finally:
        multi.clear()
    rows = [snapshots[row // 2][1] for row in range(4)]
    assert_rows_as_peft(engine, rows, ids_SL, got_SLV)


def test_after_a_batch_the_adapters_are_dropped(setup: tuple[TorchEngine, list[str]]) -> None:
    engine, packages = setup
    request = SampleRequest(prompt=PROMPT, max_tokens=3, temperature=0.0)
    engine.sample_mixed([(packages[0], request), (None, request)])
    multi = engine._decoders.multi()
    assert multi.adapters == 0
    assert all(m.a_NIR is None and m.a_GIR is None for m in multi._layers.values())
    # rows of the base only, adapters stacked or not: no low-rank term at all
    key, snapshot = engine._snapshots.get(packages[0])
    try:
        assert multi.slot(key, snapshot) == 1
        multi.set_rows([0, 0])
        assert multi._rows.groups is None
        multi.set_rows([0, 1])
        groups = multi._rows.groups
        assert groups is not None and groups.base_S11 is not None
        assert groups.base_S11.flatten().tolist() == [True, False]
    finally:
        multi.clear()


REQUESTS = [
    SampleRequest(prompt=PROMPT, max_tokens=14, temperature=0.0, seed=1),
    SampleRequest(prompt=PROMPT, max_tokens=14, temperature=1.0, seed=2, num_samples=2),
    SampleRequest(prompt=OTHER, max_tokens=10, temperature=0.7, seed=3, top_k=20),
    SampleRequest(prompt=PROMPT, max_tokens=14, temperature=0.0, seed=4),
    SampleRequest(prompt=OTHER, max_tokens=12, temperature=1.0, seed=5, top_p=0.9),
]


def test_a_mixed_batch_decodes_each_request_as_alone(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    """Five requests over three packages, a package of another rank and the base, greedy
    and seeded, in one batch: each gives the tokens and logprobs it gives alone."""
    engine, packages = setup
    weights = [packages[0], packages[1], None, packages[3], packages[2]]
    alone = [engine.sample(w, [r])[0] for w, r in zip(weights, REQUESTS, strict=True)]
    greedy = [alone[0], alone[3]]
    assert greedy[0].sequences[0].tokens != greedy[1].sequences[0].tokens
    mixed = engine.sample_mixed(list(zip(weights, REQUESTS, strict=True)))
    for a, b, request in zip(alone, mixed, REQUESTS, strict=True):
        assert_same(a, b, request.temperature)
    # the same prompt, greedy, through package 0 and package 2: different adapters rows
    tokens = {w: engine.sample(w, [REQUESTS[0]])[0].sequences[0].tokens for w in (None, *packages)}
    assert len({tuple(t) for t in tokens.values()}) == len(tokens)


def test_rows_joining_mid_batch_bring_their_own_adapter(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    """A batch of package 0 and the base, joined after 3 steps by a request on a package
    the batch has not met (its slot is stacked mid-batch) and after 8 by the base and
    package 0 again: every request decodes as alone, the running ones unaffected."""
    engine, packages = setup
    start = [(packages[0], REQUESTS[1]), (None, REQUESTS[0])]
    later = {3: [(packages[3], REQUESTS[2])], 8: [(None, REQUESTS[4]), (packages[0], REQUESTS[3])]}
    order = start + later[3] + later[8]
    alone = [engine.sample(w, [r])[0] for w, r in order]
    calls = 0
    checked: list[str | None] = []

    def admit(
        check: Callable[[str | None, SampleRequest], SampleRequest],
    ) -> list[tuple[str | None, SampleRequest]]:
        nonlocal calls
        calls += 1
        joining = later.get(calls, [])
        checked.extend(w for w, _ in joining)
        return [(w, check(w, r)) for w, r in joining]

    mixed = engine.sample_mixed(start, admit=admit)
    assert calls > 8 and checked == [packages[3], None, packages[0]]
    for a, b, (_, request) in zip(alone, mixed, order, strict=True):
        assert_same(a, b, request.temperature)


def test_a_bad_joiner_package_fails_in_its_check(
    setup: tuple[TorchEngine, list[str]], tmp_path: Path
) -> None:
    engine, packages = setup
    errors: list[str] = []

    def admit(
        check: Callable[[str | None, SampleRequest], SampleRequest],
    ) -> list[tuple[str | None, SampleRequest]]:
        try:
            check(str(tmp_path / "missing"), REQUESTS[0])
        except Exception as exc:  # noqa: BLE001 - the test reads the message
            errors.append(str(exc))
        return []

    result = engine.sample_mixed([(packages[0], REQUESTS[0])], admit=admit)
    assert errors and "missing" in errors[0]
    assert_same(engine.sample(packages[0], [REQUESTS[0]])[0], result[0], REQUESTS[0].temperature)


def test_prompt_logprobs_of_a_mixed_batch_are_each_weights_own(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    engine, packages = setup
    request = SampleRequest(
        prompt=PROMPT, max_tokens=2, temperature=0.0, include_prompt_logprobs=True
    )
    mixed = engine.sample_mixed([(packages[1], request), (None, request)])
    for weights, result in zip([packages[1], None], mixed, strict=True):
        want = engine.compute_logprobs(weights, PROMPT)
        torch.testing.assert_close(
            torch.tensor(result.prompt_logprobs[1:]), torch.tensor(want[1:]), atol=1e-5, rtol=0
        )
    assert abs(mixed[0].prompt_logprobs[-1] - mixed[1].prompt_logprobs[-1]) > 1e-3


def test_only_plain_lora_layers_mix(setup: tuple[TorchEngine, list[str]]) -> None:
    """DoRA layers (a norm of the merged weight per row) are not a low-rank delta: such a
    model keeps one batch per adapter; a closed engine mixes nothing."""
    engine, _ = setup
    assert can_mix(engine.model) and engine.mixes_weights
    base, _ = build_builtin(TINY)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_dora=True)
    assert not can_mix(get_peft_model(base, config))
    closed = TorchEngine(EngineSpec(TINY, rank=4, alpha=8, seed=0, options=OPTIONS))
    closed.close()
    assert not closed.mixes_weights


def test_sessions_on_one_base_mix_each_others_packages(
    setup: tuple[TorchEngine, list[str]],
) -> None:
    """Engines on one pooled base and adapted modules share a ``mix_key`` (any rank); one
    decodes the other's package, its own and the base in one batch, each as the saving
    engine decodes it alone. A private base or an adapted head gives another key."""
    engine, packages = setup
    other = TorchEngine(EngineSpec(TINY, rank=4, alpha=8, seed=2, options=OPTIONS))
    unembed = TorchEngine(
        EngineSpec(TINY, rank=8, alpha=16, seed=0, train_unembed=True, options=OPTIONS)
    )
    try:
        assert engine.mix_key is not None and other.mix_key == engine.mix_key
        assert unembed.mix_key is not None and unembed.mix_key != engine.mix_key
        theirs = _random_package(other, Path(packages[0]).parent / "other", seed=5)
        items = [(theirs, REQUESTS[1]), (packages[2], REQUESTS[0]), (None, REQUESTS[4])]
        alone = [
            other.sample(theirs, [REQUESTS[1]])[0],
            engine.sample(packages[2], [REQUESTS[0]])[0],
            other.sample(None, [REQUESTS[4]])[0],
        ]
        for a, b, (_, request) in zip(alone, engine.sample_mixed(items), items, strict=True):
            assert_same(a, b, request.temperature)
    finally:
        other.close()
        unembed.close()


def test_an_engine_that_cannot_mix_runs_each_weights_in_turn(
    setup: tuple[TorchEngine, list[str]], make_engine: Callable[..., TorchEngine]
) -> None:
    _, packages = setup
    engine = make_engine()
    engine._decoders.can_mix = False  # as for a DoRA adapter
    weights = [packages[0], None, packages[1], packages[0]]
    requests = [REQUESTS[0], REQUESTS[1], REQUESTS[2], REQUESTS[3]]
    got = engine.sample_mixed(list(zip(weights, requests, strict=True)))
    assert engine._decoders._multi is None and not engine.mixes_weights
    want = engine.sample(packages[0], [REQUESTS[0], REQUESTS[3]])
    assert got[0] == want[0] and got[3] == want[1]
    assert got[1] == engine.sample(None, [REQUESTS[1]])[0]
    assert got[2] == engine.sample(packages[1], [REQUESTS[2]])[0]


@pytest.mark.parametrize(("decode", "on_slots"), [("static", True), ("dynamic", False)])
def test_a_mixed_batch_runs_on_the_chosen_decode_loop(
    setup: tuple[TorchEngine, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    decode: str,
    on_slots: bool,
) -> None:
    """The static decoder (the default) runs mixed batches too, on a CPU's eager step: every
    decode step sees the batch's KV slots; the dynamic loop none. (The tests above compare
    whichever loop the options choose with each request decoded alone.)"""
    engine, packages = setup
    monkeypatch.setattr(engine._sampler, "decode", decode)
    live: list[int] = []
    remove = add_step_hook(lambda step: live.append(len(slot_cache.LIVE)))
    try:
        engine.sample_mixed([(packages[0], REQUESTS[0]), (packages[1], REQUESTS[1])])
    finally:
        remove()
    assert live and all(n == (1 if on_slots else 0) for n in live)


def test_rows_are_grouped_by_adapter_padded_to_the_largest_group() -> None:
    """Slots [2, 0, 1, 2, 1]: groups of slot 1 (rows 2, 4) and slot 2 (rows 0, 3), each row's
    delta read back from its place, the base row from any (and zeroed); rows already in
    equal groups in slot order skip the gathers; a short group repeats its first row."""
    cpu = torch.device("cpu")
    groups = group_rows([2, 0, 1, 2, 1], [0.5, 2.0], cpu)
    assert groups.present == (1, 2)
    assert groups.index_GM is not None and groups.index_GM.tolist() == [[2, 4], [0, 3]]
    assert groups.back_S is not None and groups.back_S.tolist() == [2, 0, 0, 3, 1]
    assert groups.base_S11 is not None
    assert groups.base_S11.flatten().tolist() == [False, True, False, False, False]
    assert groups.scale_G11.flatten().tolist() == [0.5, 2.0]
    same = group_rows([1, 1, 3, 3], [1.0, 1.0, 4.0], cpu)
    assert same.present == (1, 3) and same.index_GM is None and same.back_S is None
    assert same.base_S11 is None and same.scale_G11.flatten().tolist() == [1.0, 4.0]
    short = group_rows([1, 1, 2], [1.0, 1.0], cpu)
    assert short.index_GM is not None and short.index_GM.tolist() == [[0, 1], [2, 2]]
    assert short.back_S is not None and short.back_S.tolist() == [0, 1, 2]
    assert short.base_S11 is None
