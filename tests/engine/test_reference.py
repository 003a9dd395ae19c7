"""The engine against a direct transformers + peft computation on the same weights.

The reference builds its own peft model (explicit target modules, not the engine's helper),
copies the engine's adapter into it, and computes the summed cross entropy one datum at a
time without padding; one ``torch.optim.AdamW`` step then gives the expected adapter.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model

from localsession.engine import fast_linear
from localsession.engine.builtin import build_builtin
from localsession.engine.torch_engine import TorchEngine
from localsession.port import AdamHyperparams

from .helpers import make_datum, random_tokens

# peft's get_peft_model trips a transformers deprecation warning users cannot act on.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def randomise_b(engine: TorchEngine, seed: int) -> None:
    """Give every LoRA B a non-zero value so the adapter (and A's gradient) matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(engine.model.named_parameters()):
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


def reference_model(engine: TorchEngine, rank: int, alpha: int) -> Any:
    base, _ = build_builtin("localsession/tiny")
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0)
    ref = get_peft_model(base, config)
    adapter = engine.adapter_state_dict()
    ref_params = dict(ref.named_parameters())
    assert sorted(n for n, p in ref_params.items() if p.requires_grad) == sorted(adapter)
    with torch.no_grad():
        for name, value in adapter.items():
            ref_params[name].copy_(value)
    return ref


#: The gradients' tolerance above (``assert_close(atol=GRAD_ATOL, rtol=GRAD_RTOL)``).
GRAD_ATOL, GRAD_RTOL = 1e-5, 1e-4
#: How far the two sides' first Adam step may differ where it is determined by the gradients.
STEP_ATOL = 1e-6


def adam_first_step_is_determined(grad: torch.Tensor, lr: float, eps: float) -> torch.Tensor:
    """Where the two sides' first AdamW step must agree to ``STEP_ATOL / 2`` (half the
    budget; float32 rounding of the parameters has the rest), given only that their
    gradients agree to ``d = GRAD_ATOL + GRAD_RTOL |g|`` (``g``: the reference's).

    The bias-corrected first step moves an element by ``lr f(g)`` (plus the same weight
    decay on both sides), ``f(g) = g / (|g| + eps)``, with ``f'(x) = eps / (|x| + eps)^2``.
    Where ``|g| > d`` both gradients have the same sign and every ``x`` between them has
    ``|x| >= |g| - d``, so the steps differ by at most ``lr eps d / (|g| - d)^2``; that is at
    most ``STEP_ATOL / 2`` where ``|g| - d >= sqrt(2 lr eps d / STEP_ATOL)``. Elsewhere only
    ``|f| <= 1`` holds, so the steps differ by at most ``2 lr``. Here (lr 1e-3, eps 1e-8) the
    bound is ``|g| >~ 2.4e-5``: it leaves out 1 of the 23,552 adapter entries (0.004 %),
    where the former fixed ``|g| > 1e-4`` left out 12 (0.05 %)."""
    d = GRAD_ATOL + GRAD_RTOL * grad.abs()  # [*param]
    margin = torch.sqrt(2 * lr * eps * d / STEP_ATOL)  # [*param]
    return grad.abs() - d >= margin


def test_the_determined_region_bounds_the_worst_pair_of_steps() -> None:
    """At the edge of adam_first_step_is_determined, the two gradients furthest apart that
    the tolerance allows (g and g - d) give steps within STEP_ATOL / 2; just inside the
    edge the same pair can differ by more (the bound is not loose by orders)."""
    lr, eps = 1e-3, 1e-8
    grads = torch.logspace(-6, -1, 2001, dtype=torch.float64)  # [G]
    sure = adam_first_step_is_determined(grads, lr=lr, eps=eps)  # [G]
    d = GRAD_ATOL + GRAD_RTOL * grads
    step = lambda g: lr * g / (g.abs() + eps)  # noqa: E731 - the closed form, both sides
    worst = (step(grads) - step(grads - d)).abs()  # [G]
    assert bool(sure.any()) and bool((~sure).any())
    assert float(worst[sure].max()) <= STEP_ATOL / 2
    edge = int(sure.nonzero()[0])  # the first gradient counted as determined
    assert float(worst[edge - 20 : edge].max()) > STEP_ATOL / 8


def test_cross_entropy_logprobs_grads_and_adamw_step(
    make_engine: Callable[..., TorchEngine],
) -> None:
    engine = make_engine(rank=4, alpha=8, seed=3)
    randomise_b(engine, seed=7)
    ref = reference_model(engine, rank=4, alpha=8)
    token_lists = random_tokens(3, 24, seed=11)
    weights = [[float((i + j) % 3 != 0) for j in range(len(t))] for i, t in enumerate(token_lists)]
    datums = [make_datum(t, weights=w) for t, w in zip(token_lists, weights, strict=True)]

    result = engine.forward_backward(datums, "cross_entropy", None, backward=True)

    total = torch.zeros(())
    for i, tokens in enumerate(token_lists):
        ids = torch.tensor([tokens])
        targets = torch.tensor(tokens[1:] + [0])
        logits = ref(input_ids=ids).logits[0]  # [T, V]
        lp = torch.log_softmax(logits, dim=-1)[torch.arange(len(tokens)), targets]
        got = torch.tensor(result.outputs[i].logprobs)
        torch.testing.assert_close(got, lp.detach(), atol=1e-5, rtol=0)
        total = total - (torch.tensor(weights[i]) * lp).sum()
    total.backward()
    mean = total.item() / len(token_lists)  # reported: the per-datum mean of Σ ℓ
    assert abs(result.metrics["loss"] - mean) < 1e-4 * max(1.0, abs(mean))
    assert result.metrics["global_token_num"] == sum(len(t) for t in token_lists)

    ref_params = {n: p for n, p in ref.named_parameters() if p.requires_grad}
    for name, p in engine.model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and ref_params[name].grad is not None
            torch.testing.assert_close(
                p.grad, ref_params[name].grad, atol=GRAD_ATOL, rtol=GRAD_RTOL
            )
    ref_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ref_params.values()))
    assert result.metrics["actor/grad_norm"] == pytest.approx(float(ref_norm), rel=1e-4)

    adam = AdamHyperparams(learning_rate=1e-3, beta1=0.85, beta2=0.99, eps=1e-8, weight_decay=0.05)
    metrics = engine.optim_step(adam).metrics
    ref_grads = [p.grad for p in ref_params.values() if p.grad is not None]
    expected_norm = torch.sqrt(sum((g.double() ** 2).sum() for g in ref_grads)).item()
    assert abs(metrics["grad_norm"] - expected_norm) < 1e-4 * expected_norm
    opt = torch.optim.AdamW(
        list(ref_params.values()), lr=1e-3, betas=(0.85, 0.99), eps=1e-8, weight_decay=0.05
    )
    opt.step()
    after = engine.adapter_state_dict()
    checked = total_entries = 0
    for name, p in ref_params.items():
        assert p.grad is not None
        sure = adam_first_step_is_determined(p.grad, lr=1e-3, eps=1e-8)
        checked += int(sure.sum())
        total_entries += sure.numel()
        torch.testing.assert_close(after[name][sure], p.detach()[sure], atol=STEP_ATOL, rtol=0)
        assert float((after[name] - p.detach()).abs().max()) <= 2 * 1e-3 + STEP_ATOL
    assert checked >= 0.99 * total_entries  # the bound leaves out few (1 of 23,552 here)


def test_fresh_adapter_equals_base_model(
    make_engine: Callable[..., TorchEngine], tiny_base: tuple[Any, Any]
) -> None:
    # B = 0: the adapted model computes the base model's logprobs, given the same matmul
    # kernels (the engine's linear layers may run oneDNN), to the float rounding of its
    # fused head (head_logprobs.py sums the log-softmax in another order).
    engine = make_engine(rank=8, alpha=16, seed=5)
    base = copy.deepcopy(tiny_base[0])
    fast_linear.install(base)
    tokens = random_tokens(1, 40, seed=2)[0]
    out = engine.forward([make_datum(tokens)], "cross_entropy", None)
    with torch.no_grad():
        logits = base(input_ids=torch.tensor([tokens])).logits.float()
    targets = torch.tensor([tokens[1:] + [0]])
    lp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert out.outputs[0].logprobs == pytest.approx(lp[0].tolist(), rel=1e-6, abs=1e-6)
