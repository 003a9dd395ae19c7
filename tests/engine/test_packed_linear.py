"""Packed decode products (engine/packed_linear.py): values against a float64 reference at
every routed row count, the routing rule, repacking after an in-place change, the budget
and the copies' lifetime, the probe's agreement check, and an engine that samples the same
tokens with packing on as off."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextvars import copy_context
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from localsession.engine import packed_linear
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions, SettingError
from localsession.port import SampleRequest

from .conftest import OPTIONS

pytestmark = pytest.mark.skipif(
    not packed_linear.available(), reason="this torch has no MKL packed GEMM"
)
MB = 2**20
SMALL = "localsession/small"  # 256 wide: all but its key and value weights are packed


@pytest.fixture
def unpacked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed products off for one test, engines it loads included, and back as they were
    after it: the switch is process-wide."""
    monkeypatch.setattr(packed_linear, "_budget", 0)
    monkeypatch.setattr(packed_linear, "_verdict", packed_linear._verdict)


@pytest.fixture
def agreeing_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe packs whatever its timing says on this host (its agreement check still
    runs); the process-wide switch is undecided before the test and as it was after."""
    real = packed_linear.probe

    def probe(kernel: packed_linear.Kernel = F.linear) -> tuple[bool, str]:
        use, why = real(kernel)
        return (use or why.endswith("x unpacked on a decode step's products")), why

    monkeypatch.setattr(packed_linear, "probe", probe)
    monkeypatch.setattr(packed_linear, "_verdict", None)
    monkeypatch.setattr(packed_linear, "_budget", 0)


@pytest.fixture
def packing(agreeing_is_enough: None) -> Iterator[Callable[[int], bool]]:
    """``packing(extra_bytes)``: packed products on, with room for ``extra_bytes`` of copies
    beyond those alive, and the test's products inside a decode step."""
    with packed_linear.decoding():
        yield lambda extra: packed_linear.configure(packed_linear.held_bytes() + extra)


def _reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().T
    return out if b is None else out + b.double()


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def test_products_match_a_float64_reference(packing: Callable[[int], bool]) -> None:
    assert packing(64 * MB)
    held = packed_linear.held_bytes()
    gen = torch.Generator().manual_seed(1)
    w_NK = torch.randn(1536, 576, generator=gen) / 24
    b_N = torch.randn(1536, generator=gen)
    for rows in (1, 3, 16, 64, 100, packed_linear.MAX_ROWS):
        for bias in (None, b_N):
            x_MK = torch.randn(rows, 576, generator=gen)
            got = packed_linear.product(x_MK, w_NK, bias)
            assert got is not None and got.shape == (rows, 1536)
            assert _relative_error(got, _reference(x_MK, w_NK, bias)) < 1e-6, (rows, bias)
    x_BTK = torch.randn(4, 8, 576, generator=gen)  # leading dims: 32 rows
    got = packed_linear.product(x_BTK, w_NK, b_N)
    assert got is not None and got.shape == (4, 8, 1536)
    assert _relative_error(got, _reference(x_BTK, w_NK, b_N)) < 1e-6
    assert packed_linear.held_bytes() == held + w_NK.numel() * 4  # one copy, reused


def test_what_is_routed(packing: Callable[[int], bool]) -> None:
    assert packing(64 * MB)
    w_NK = torch.randn(1536, 576)
    x_MK = torch.randn(8, 576)
    assert packed_linear.product(torch.randn(packed_linear.MAX_ROWS + 1, 576), w_NK, None) is None
    assert packed_linear.product(x_MK, torch.randn(100, 576), None) is None  # too small a weight
    assert packed_linear.product(x_MK.bfloat16(), w_NK.bfloat16(), None) is None
    needs_grad = x_MK.clone().requires_grad_(True)
    assert packed_linear.product(needs_grad, w_NK, None) is None  # training: autograd's path
    assert packed_linear.product(x_MK, w_NK.clone().requires_grad_(True), None) is None
    with torch.no_grad():
        assert packed_linear.product(needs_grad, w_NK, None) is not None
    assert packed_linear.product(x_MK, w_NK, None) is not None  # nothing needs a gradient
    outside = copy_context()
    outside.run(packed_linear._decoding.set, False)
    assert outside.run(packed_linear.product, x_MK, w_NK, None) is None  # not a decode step


def test_a_weight_changed_in_place_is_packed_again(packing: Callable[[int], bool]) -> None:
    assert packing(64 * MB)
    held = packed_linear.held_bytes()
    w_NK = torch.randn(1536, 576) / 24
    x_MK = torch.randn(16, 576)
    before = packed_linear.product(x_MK, w_NK, None)
    assert before is not None
    with torch.no_grad():
        w_NK.mul_(-2.0)  # as a merged copy re-merged for another snapshot
    after = packed_linear.product(x_MK, w_NK, None)
    assert after is not None
    assert _relative_error(after, _reference(x_MK, w_NK, None)) < 1e-6
    assert torch.allclose(after, -2.0 * before, rtol=1e-5, atol=1e-5)
    assert packed_linear.held_bytes() == held + w_NK.numel() * 4  # the old copy went


def test_copies_stay_in_the_budget_and_go_with_their_weights(
    packing: Callable[[int], bool],
) -> None:
    first, second = torch.randn(1536, 576), torch.randn(1536, 576)
    size = first.numel() * 4
    held = packed_linear.held_bytes()
    assert packing(size + size // 2)  # room for one copy
    x_MK = torch.randn(8, 576)
    assert packed_linear.product(x_MK, first, None) is not None
    assert packed_linear.product(x_MK, second, None) is None  # runs unpacked, nothing evicted
    assert packed_linear.held_bytes() == held + size
    del first
    gc.collect()
    assert packed_linear.held_bytes() == held  # the copy went with its weight
    assert packed_linear.product(x_MK, second, None) is not None
    assert packed_linear.held_bytes() == held + size


def test_the_probe_refuses_products_that_disagree(
    monkeypatch: pytest.MonkeyPatch, unpacked: None
) -> None:
    real = packed_linear.packed_product

    def off_by_a_little(x: torch.Tensor, *args: torch.Tensor | None) -> torch.Tensor:
        out = real(x, *args)  # type: ignore[arg-type]
        return out + 1e-3 if x.shape[0] == 7 else out  # one row count reads the layout wrong

    monkeypatch.setattr(packed_linear, "packed_product", off_by_a_little)
    assert packed_linear.probe() == (
        False,
        "MKL's packed product disagrees with F.linear at 7 rows",
    )
    monkeypatch.setattr(packed_linear, "_verdict", None)
    assert not packed_linear.configure(64 * MB)
    with packed_linear.decoding():
        assert packed_linear.product(torch.randn(8, 576), torch.randn(1536, 576), None) is None


def test_the_probe_times_against_the_kernel_in_force() -> None:
    use, why = packed_linear.probe()
    assert why.startswith("packed ") and why.endswith("x unpacked on a decode step's products")
    assert use == (float(why.split()[1].rstrip("x")) >= packed_linear.PROBE_MARGIN)
    slow_calls: list[int] = []

    def slow(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        slow_calls.append(x.shape[0])
        return F.linear(x, w).add(0).add(0).add(0).add(0)

    assert packed_linear.probe(slow)[1].startswith("packed ")
    assert set(slow_calls) == {rows for rows, _, _ in packed_linear.PROBE_SHAPES}


def test_the_budget_option(monkeypatch: pytest.MonkeyPatch, unpacked: None) -> None:
    assert EngineOptions().packed_cache_mb == 1024
    assert EngineOptions.parse({packed_linear.PACKED_ENV: "0"}).packed_cache_bytes == 0
    assert EngineOptions.parse({packed_linear.PACKED_ENV: "1.5"}).packed_cache_bytes == 3 * MB // 2
    with pytest.raises(SettingError, match="LOCALSESSION_PACKED_CACHE_MB='-1'"):
        EngineOptions.parse({packed_linear.PACKED_ENV: "-1"})
    monkeypatch.setattr(packed_linear, "_verdict", None)
    monkeypatch.setattr(packed_linear, "probe", lambda *_: pytest.fail("probed for nothing"))
    assert not packed_linear.configure(0)
    with packed_linear.decoding():
        assert packed_linear.product(torch.randn(8, 576), torch.randn(1536, 576), None) is None


def _sample(engine: TorchEngine, tmp_path: Path, name: str) -> tuple[list[int], list[float]]:
    directory = tmp_path / name
    engine.save_package(str(directory), include_optimizer=False, merge_weights=False)
    request = SampleRequest(prompt=[257, 72, 101, 108], max_tokens=24, temperature=0.0, seed=0)
    (out,) = engine.sample(str(directory), [request, request])[:1]
    sequence = out.sequences[0]
    return list(sequence.tokens), list(sequence.logprobs or [])


def test_an_engine_samples_the_same_with_packing_on_and_off(
    make_engine: Callable[..., TorchEngine],
    agreeing_is_enough: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    calls: list[int] = []
    real = packed_linear.packed_product

    def counted(x: torch.Tensor, *args: torch.Tensor | None) -> torch.Tensor:
        calls.append(x.numel() // x.shape[-1])
        return real(x, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(packed_linear, "packed_product", counted)
    unpacked = make_engine(base_model=SMALL, options=replace(OPTIONS, packed_cache_mb=0))
    want_tokens, want_logprobs = _sample(unpacked, tmp_path, "off")
    assert calls == []
    held = packed_linear.held_bytes()
    packed = make_engine(base_model=SMALL)
    assert packed_linear.held_bytes() == held  # packed on first use
    calls.clear()  # the probe's own products
    tokens, logprobs = _sample(packed, tmp_path, "on")
    assert calls and set(calls) <= {1, 2}  # decode steps of two streams; no prefill (8 rows)
    assert packed_linear.held_bytes() > held
    assert tokens == want_tokens
    assert logprobs == pytest.approx(want_logprobs, abs=1e-5)
