"""``PlainAdamW`` (the fakes' optimizer) against ``torch.optim.AdamW``, an independent code."""

from __future__ import annotations

import pytest
import torch

from localsession.numerics.adamw import PlainAdamW
from localsession.port import AdamHyperparams


def _params() -> list[tuple[str, torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(0)
    return [
        ("lora_A.weight", torch.nn.Parameter(torch.randn(5, 3, generator=gen))),
        ("lora_B.weight", torch.nn.Parameter(torch.randn(3, 5, generator=gen))),
    ]


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(5, 3, generator=gen), torch.randn(3, 5, generator=gen)]


@pytest.mark.parametrize(
    "hp",
    [
        AdamHyperparams(learning_rate=1e-2),
        AdamHyperparams(learning_rate=3e-3, beta1=0.5, beta2=0.9, eps=1e-6, weight_decay=0.1),
        AdamHyperparams(learning_rate=1e-2, lora_plus_lr_ratio=4.0),
        AdamHyperparams(learning_rate=1e-2, grad_clip_norm=0.5),
    ],
)
def test_matches_torch_adamw(hp: AdamHyperparams) -> None:
    ours, theirs = _params(), _params()
    plain = PlainAdamW(ours)
    ratio = hp.lora_plus_lr_ratio or 1.0
    reference = torch.optim.AdamW(
        [
            {"params": [theirs[0][1]], "lr": hp.learning_rate},
            {"params": [theirs[1][1]], "lr": hp.learning_rate * ratio},
        ],
        betas=(hp.beta1, hp.beta2),
        eps=hp.eps,
        weight_decay=hp.weight_decay,
        foreach=False,
    )
    for step in range(4):
        grads = _grads(step)
        for (_, p), g in zip(ours, grads, strict=True):
            p.grad = g.clone()
        for (_, p), g in zip(theirs, grads, strict=True):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(
            [p for _, p in theirs], hp.grad_clip_norm or float("inf")
        )
        metrics = plain.step(hp)
        reference.step()
        assert metrics["grad_norm"] == pytest.approx(float(norm), rel=1e-6)
        assert metrics["num_params_updated"] == 30.0
        for (_, a), (_, b) in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-6, atol=1e-7)
    assert not plain.has_grad()


def test_zero_learning_rate_and_no_grad_leave_weights_bit_identical() -> None:
    params = _params()
    plain = PlainAdamW(params)
    before = [p.detach().clone() for _, p in params]
    assert plain.step(AdamHyperparams(learning_rate=1e-2))["grad_norm"] == 0.0  # none accumulated
    for (_, p), g in zip(params, _grads(0), strict=True):
        p.grad = g
    assert plain.step(AdamHyperparams(learning_rate=0.0))["grad_norm"] > 0
    for (_, p), b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)
    assert plain.named_state() == {} and not plain.has_grad()


def test_named_state_round_trip_resumes_exactly() -> None:
    a, b = _params(), _params()
    first, second = PlainAdamW(a), PlainAdamW(b)
    hp = AdamHyperparams(learning_rate=1e-2)
    for (_, p), g in zip(a, _grads(0), strict=True):
        p.grad = g.clone()
    first.step(hp)
    with torch.no_grad():
        for (_, p), (_, q) in zip(a, b, strict=True):
            q.copy_(p)
    second.load_named_state(first.named_state(), first.last_params)
    for params in (a, b):
        for (_, p), g in zip(params, _grads(1), strict=True):
            p.grad = g.clone()
    first.step(hp)
    second.step(hp)
    for (_, p), (_, q) in zip(a, b, strict=True):
        assert torch.equal(p.detach(), q.detach())
    assert second.named_state()["lora_A.weight"].step == 2
