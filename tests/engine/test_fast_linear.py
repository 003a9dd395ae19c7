"""oneDNN linear layers (engine/fast_linear.py): values and gradients against a float64
reference, the size and dtype routing, the ``LOCALSESSION_LINEAR`` modes and the clean
fallback, and an engine that agrees with plain MKL on losses, gradients and greedy tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from localsession.engine import fast_linear
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions

from .conftest import OPTIONS
from .helpers import greedy, random_tokens, train


@pytest.fixture
def onednn_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The input shape of every oneDNN call from here on."""
    calls: list[tuple[int, ...]] = []
    real = fast_linear._onednn

    def counting(x: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(fast_linear, "_onednn", counting)
    return calls


@pytest.fixture
def mode(
    monkeypatch: pytest.MonkeyPatch, onednn_calls: list[tuple[int, ...]]
) -> Iterator[Callable[[str], None]]:
    """``mode("onednn")`` / ``mode("mkl")``: choose the kernel from here on (the probe's own
    oneDNN calls are not counted)."""

    def choose(value: str) -> None:
        fast_linear.reset()
        try:
            fast_linear.decision(value)  # what installing a model with this mode decides
        finally:
            onednn_calls.clear()

    yield choose
    fast_linear.reset()  # the next test decides afresh, from the real environment


needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN"
)


@needs_onednn
def test_values_and_gradients_match_a_float64_reference(
    mode: Callable[[str], None], onednn_calls: list[tuple[int, ...]]
) -> None:
    mode("onednn")
    gen = torch.Generator().manual_seed(3)
    x_BTK = torch.randn(4, 40, 192, generator=gen, requires_grad=True)
    w_NK = (torch.randn(384, 192, generator=gen) / 14).requires_grad_(True)
    b_N = torch.randn(384, generator=gen, requires_grad=True)
    g_BTN = torch.randn(4, 40, 384, generator=gen)
    y_BTN = fast_linear.linear(x_BTK, w_NK, b_N)
    y_BTN.backward(g_BTN)
    assert len(onednn_calls) == 2  # forward, grad of x (the weight's: torch's mm)
    x64, w64, b64, g64 = (t.detach().double() for t in (x_BTK, w_NK, b_N, g_BTN))
    want = {
        "y": x64 @ w64.T + b64,
        "x": g64 @ w64,
        "w": g64.reshape(-1, 384).T @ x64.reshape(-1, 192),
        "b": g64.reshape(-1, 384).sum(0),
    }
    got = {"y": y_BTN.detach(), "x": x_BTK.grad, "w": w_NK.grad, "b": b_N.grad}
    for key, value in want.items():
        error = float((got[key].double() - value).norm() / value.norm())  # type: ignore[union-attr]
        assert error < 1e-6, (key, error)


@needs_onednn
def test_a_frozen_weight_costs_one_call_each_way(
    mode: Callable[[str], None], onednn_calls: list[tuple[int, ...]]
) -> None:
    mode("onednn")
    x_MK = torch.randn(64, 576, requires_grad=True)
    w_NK = torch.randn(1536, 576)
    fast_linear.linear(x_MK, w_NK).sum().backward()
    assert onednn_calls == [(64, 576), (64, 1536)]
    assert x_MK.grad is not None
    want = torch.ones(64, 1536, dtype=torch.float64) @ w_NK.double()
    assert torch.allclose(x_MK.grad.double(), want, rtol=1e-5, atol=1e-4)


@needs_onednn
def test_small_products_other_dtypes_and_no_grad(
    mode: Callable[[str], None], onednn_calls: list[tuple[int, ...]]
) -> None:
    mode("onednn")
    small_x, small_w = torch.randn(8, 128), torch.randn(128, 128)  # 131k multiply-adds
    assert torch.equal(fast_linear.linear(small_x, small_w), F.linear(small_x, small_w))
    x_MK, w_NK = torch.randn(64, 576), torch.randn(1536, 576)
    half = fast_linear.linear(x_MK.bfloat16(), w_NK.bfloat16())
    assert torch.equal(half, F.linear(x_MK.bfloat16(), w_NK.bfloat16()))
    assert onednn_calls == []
    with torch.no_grad():
        fast_linear.linear(x_MK.requires_grad_(True), w_NK)
    assert onednn_calls == [(64, 576)]  # a big float32 product, straight to oneDNN


def test_modes(mode: Callable[[str], None], monkeypatch: pytest.MonkeyPatch) -> None:
    mode("mkl")
    assert not fast_linear.enabled()
    assert fast_linear.probe("mkl") == (False, f"{fast_linear.LINEAR_ENV}=mkl")
    # asked without a mode (a bench's report), the decision in force is read, not replaced
    assert fast_linear.decision() == (False, f"{fast_linear.LINEAR_ENV}=mkl")
    assert not fast_linear.enabled()
    assert EngineOptions.parse({fast_linear.LINEAR_ENV: " OFF"}).linear == "mkl"
    with pytest.raises(ValueError, match="LOCALSESSION_LINEAR='fast please': expected auto"):
        EngineOptions.parse({fast_linear.LINEAR_ENV: "fast please"})
    mode("auto")
    use, why = fast_linear.probe("auto")
    assert why.startswith("oneDNN ") or why == "this torch has no oneDNN"
    speedup = float(why.split()[1].rstrip("x")) if why.startswith("oneDNN ") else 0.0
    assert use == (speedup >= fast_linear.PROBE_MARGIN)


@pytest.mark.parametrize("broken", ["unavailable", "raises"])
def test_falls_back_to_torch_cleanly(
    broken: str, mode: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    if broken == "unavailable":
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    else:

        def failing(*args: Any) -> torch.Tensor:
            raise RuntimeError("no primitive for this CPU")

        monkeypatch.setattr(fast_linear, "_onednn", failing)
    mode("onednn")
    use, why = fast_linear.probe("onednn")
    assert not use and ("no oneDNN" in why or "no primitive for this CPU" in why)
    assert not fast_linear.enabled()
    x_MK, w_NK = torch.randn(64, 576), torch.randn(1536, 576)
    assert torch.equal(fast_linear.linear(x_MK, w_NK), F.linear(x_MK, w_NK))


def test_install_reclasses_every_plain_linear_and_keeps_names(
    make_engine: Callable[..., TorchEngine],
) -> None:
    model = make_engine().model
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear]
    fast = [m for m in model.modules() if type(m) is fast_linear.FastLinear]
    assert plain == [] and len(fast) == 2 * 7 * 3 + 1  # base, A and B of 14 layers; the head
    names = list(model.state_dict())
    assert fast_linear.install(model, "mkl") == 0  # already done
    assert list(model.state_dict()) == names


@needs_onednn
def test_a_layer_under_an_accelerate_hook_runs_the_new_forward(
    mode: Callable[[str], None], onednn_calls: list[tuple[int, ...]]
) -> None:
    from accelerate.hooks import ModelHook, add_hook_to_module

    mode("onednn")
    layer = torch.nn.Linear(576, 1536)
    add_hook_to_module(layer, ModelHook())  # keeps nn.Linear's bound forward as _old_forward
    assert fast_linear.install(layer, "onednn") == 1
    x_MK = torch.randn(64, 576)
    with torch.no_grad():
        y_MN = layer(x_MK)
    assert onednn_calls == [(64, 576)]
    assert torch.allclose(y_MN, F.linear(x_MK, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_engine_agrees_with_mkl(
    make_engine: Callable[..., TorchEngine],
    mode: Callable[[str], None],
    onednn_calls: list[tuple[int, ...]],
    tmp_path: Path,
) -> None:
    mode("mkl")
    mkl = make_engine(options=replace(OPTIONS, linear="mkl"))
    mkl_losses, mkl_grads = train(mkl, 3)
    mkl_tokens = greedy(mkl, tmp_path, "mkl", prompt=random_tokens(1, 40, seed=2)[0])
    assert onednn_calls == []
    mode("onednn")
    dnn = make_engine(options=replace(OPTIONS, linear="onednn"))
    losses, gradients = train(dnn, 3)
    tokens = greedy(dnn, tmp_path, "dnn", prompt=random_tokens(1, 40, seed=2)[0])
    assert len(onednn_calls) > 30  # the MLP layers of training and the 40-token prefill
    assert losses == pytest.approx(mkl_losses, rel=1e-5)
    for got, want in zip(gradients, mkl_grads, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            error = float((got[key] - want[key]).norm())
            assert error <= 1e-4 * float(want[key].norm()), (key, error)
    assert tokens == mkl_tokens


@pytest.mark.parametrize("kernel", ["auto", "mkl"])
def test_a_strided_last_position_is_multiplied_as_rows(
    kernel: str, mode: Callable[[str], None]
) -> None:
    """A prefill head's input, each row's last position of ``[B, T, in]``: one product
    over B rows, not a batched one over the broadcast weight; ``mkl`` keeps plain torch."""
    mode(kernel)
    hidden_BTK, w_NK = torch.randn(8, 5, 64), torch.randn(3000, 64)
    last_B1K = hidden_BTK[:, -1:, :]
    with torch.profiler.profile() as prof:
        got = fast_linear.linear(last_B1K, w_NK)
    ops = {event.name for event in prof.events()}
    if kernel == "mkl":
        assert torch.equal(got, F.linear(last_B1K, w_NK)) and "aten::bmm" in ops
    else:
        assert "aten::bmm" not in ops
    want = (last_B1K.double() @ w_NK.double().T).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
