"""LoraAdamW against ``torch.optim.AdamW`` and a hand-computed first Adam step."""

from __future__ import annotations

import math

import pytest
import torch

from localsession.numerics.optim import LoraAdamW, NamedMoments, split_group_problem
from localsession.port import AdamHyperparams, EngineInputError


def make_params(seed: int = 0) -> list[tuple[str, torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(seed)
    shapes = {"layer.q.lora_A.default.weight": (4, 6), "layer.q.lora_B.default.weight": (6, 4)}
    return [
        (name, torch.nn.Parameter(torch.randn(shape, generator=gen)))
        for name, shape in shapes.items()
    ]


def grads_for(step: int, params: list[tuple[str, torch.nn.Parameter]]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen) for _, p in params]


HP = AdamHyperparams(learning_rate=1e-2, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)


def torch_adamw(params: list[torch.nn.Parameter]) -> torch.optim.AdamW:
    """The reference: torch's own AdamW with ``HP``'s hyperparameters."""
    return torch.optim.AdamW(
        params,
        lr=HP.learning_rate,
        betas=(HP.beta1, HP.beta2),
        eps=HP.eps,
        weight_decay=HP.weight_decay,
    )


def test_matches_torch_adamw_over_several_steps() -> None:
    named = make_params()
    ref = [torch.nn.Parameter(p.detach().clone()) for _, p in named]
    opt = LoraAdamW(named)
    ref_opt = torch_adamw(ref)
    for step in range(3):
        for (_, p), r, g in zip(named, ref, grads_for(step, named), strict=True):
            p.grad, r.grad = g.clone(), g.clone()
        metrics = opt.step(HP)
        ref_opt.step()
        assert metrics["num_params_updated"] == 48
        assert all(p.grad is None for _, p in named)  # zeroed
    for (_, p), r in zip(named, ref, strict=True):
        torch.testing.assert_close(p.detach(), r.detach(), atol=1e-6, rtol=0)


def test_grad_clip_and_norm_metric() -> None:
    named = make_params()
    ref = [torch.nn.Parameter(p.detach().clone()) for _, p in named]
    grads = grads_for(0, named)
    for (_, p), r, g in zip(named, ref, grads, strict=True):
        p.grad, r.grad = g.clone(), g.clone()
    expected_norm = float(torch.sqrt(torch.stack([(g**2).sum() for g in grads]).sum()))
    hp = AdamHyperparams(learning_rate=1e-2, weight_decay=0.0, grad_clip_norm=0.5)
    metrics = LoraAdamW(named).step(hp)
    assert metrics["grad_norm"] == pytest.approx(expected_norm, rel=1e-6)
    torch.nn.utils.clip_grad_norm_(ref, 0.5)
    torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.0).step()
    for (_, p), r in zip(named, ref, strict=True):
        torch.testing.assert_close(p.detach(), r.detach(), atol=1e-6, rtol=0)


def test_lora_plus_ratio_first_step_closed_form() -> None:
    named = make_params()
    before = [p.detach().clone() for _, p in named]
    grads = grads_for(0, named)
    for (_, p), g in zip(named, grads, strict=True):
        p.grad = g.clone()
    lr, wd, eps, ratio = 1e-2, 0.1, 1e-8, 16.0
    LoraAdamW(named).step(
        AdamHyperparams(learning_rate=lr, weight_decay=wd, eps=eps, lora_plus_lr_ratio=ratio)
    )
    # First step: m_hat = g, v_hat = g^2, so p <- p (1 - lr wd) - lr g / (|g| + eps).
    for (name, p), p0, g in zip(named, before, grads, strict=True):
        lr_eff = lr * ratio if "lora_B" in name else lr
        expected = p0 * (1 - lr_eff * wd) - lr_eff * g / (g.abs() + eps)
        torch.testing.assert_close(p.detach(), expected, atol=1e-6, rtol=0)


def test_zero_learning_rate_is_bit_identical() -> None:
    named = make_params()
    before = [p.detach().clone() for _, p in named]
    for (_, p), g in zip(named, grads_for(0, named), strict=True):
        p.grad = g
    metrics = LoraAdamW(named).step(AdamHyperparams(learning_rate=0.0, weight_decay=0.5))
    assert metrics["num_params_updated"] == 0 and metrics["grad_norm"] > 0
    for (_, p), p0 in zip(named, before, strict=True):
        assert torch.equal(p.detach(), p0)
        assert p.grad is None


def test_step_with_nothing_accumulated_leaves_weights() -> None:
    named = make_params()
    opt = LoraAdamW(named)
    for (_, p), g in zip(named, grads_for(0, named), strict=True):
        p.grad = g
    opt.step(HP)  # builds momentum that would move the weights on another real step
    before = [p.detach().clone() for _, p in named]
    metrics = opt.step(HP)
    assert metrics == {
        "learning_rate": HP.learning_rate,
        "grad_norm": 0.0,
        "num_params_updated": 0.0,
    }
    for (_, p), p0 in zip(named, before, strict=True):
        assert torch.equal(p.detach(), p0)


@pytest.mark.parametrize(
    ("hp", "needle"),
    [
        (AdamHyperparams(learning_rate=-1.0), "`learningRate` must be >= 0, got -1.0"),
        (AdamHyperparams(beta1=1.0), "`beta1` must be in [0, 1), got 1.0"),
        (AdamHyperparams(beta2=-0.1), "`beta2` must be in [0, 1), got -0.1"),
        (AdamHyperparams(eps=0.0), "`eps` must be > 0, got 0.0"),
        (AdamHyperparams(weight_decay=-0.5), "`weightDecay` must be >= 0, got -0.5"),
        (AdamHyperparams(grad_clip_norm=-1.0), "`gradClipNorm` must be >= 0, got -1.0"),
        (AdamHyperparams(lora_plus_lr_ratio=0.0), "`loraPlusLrRatio` must be > 0, got 0.0"),
        (AdamHyperparams(learning_rate=float("nan")), "`learningRate` must be >= 0, got nan"),
        (
            AdamHyperparams(learning_rate=1e-3, lora_plus_lr_ratio=1e300),
            "the step size (`learningRate` x `loraPlusLrRatio`) 1e+297 is past float32's range "
            "(3.4e+38): the adapter would not be finite after the step; use a learning rate "
            "like 1e-4",
        ),
        (
            AdamHyperparams(learning_rate=1e39),
            "the step size (`learningRate` x `loraPlusLrRatio`) 1e+39 is past float32's range "
            "(3.4e+38): the adapter would not be finite after the step; use a learning rate "
            "like 1e-4",
        ),
    ],
)
def test_step_refuses_values_adamw_cannot_run(hp: AdamHyperparams, needle: str) -> None:
    """What a relaxed runtime lets through: the step fails before touching any weight."""
    named = make_params()
    for (_, p), g in zip(named, grads_for(0, named), strict=True):
        p.grad = g
    before = [p.detach().clone() for _, p in named]
    with pytest.raises(EngineInputError) as err:
        LoraAdamW(named).step(hp)
    assert str(err.value) == f"adam_params: {needle}"
    for (_, p), p0 in zip(named, before, strict=True):
        assert torch.equal(p.detach(), p0) and p.grad is not None
    AdamHyperparams(learning_rate=0.0, beta1=0.0, grad_clip_norm=0.0).check()  # edges run


def test_parameter_without_gradient_steps_with_zero_gradient() -> None:
    """The documented difference from torch.optim.AdamW (which skips such a parameter): in
    a flat group where another parameter has a gradient it steps with g = 0, so on a first
    step only weight decay moves it. A group where none has one is skipped, as in torch."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"q.lora_A.w": (2, 3), "k.lora_A.w": (2, 3), "q.lora_B.w": (3, 2)}
    named = [(n, torch.nn.Parameter(torch.randn(s, generator=gen))) for n, s in shapes.items()]
    (_, qa), (_, ka), (_, qb) = named
    ka0, qb0 = ka.detach().clone(), qb.detach().clone()
    qa.grad = torch.ones(2, 3)
    lr, wd = 1e-2, 0.1
    metrics = LoraAdamW(named).step(AdamHyperparams(learning_rate=lr, weight_decay=wd))
    assert metrics["num_params_updated"] == qa.numel()
    torch.testing.assert_close(ka.detach(), ka0 * (1 - lr * wd), atol=1e-7, rtol=0)
    assert torch.equal(qb.detach(), qb0)  # the B group had no gradient at all


def test_gradients_accumulate_in_place_into_the_flat_buffer() -> None:
    """After ``install_grad_views`` two backwards add into one buffer, and the norm and the
    update read it without a copy; values match per-parameter autograd."""
    named = make_params()
    (_, a), (_, b) = named
    ref_a, ref_b = (torch.nn.Parameter(p.detach().clone()) for p in (a, b))
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(5))
    opt = LoraAdamW(named)
    opt.install_grad_views()
    view = a.grad
    for p, q in ((a, b), (ref_a, ref_b)):
        (x @ p.T @ q.T).sum().backward()
        (x @ p.T @ q.T).pow(2).sum().backward()
    assert a.grad is view  # accumulated in place, not replaced
    torch.testing.assert_close(a.grad, ref_a.grad)
    torch.testing.assert_close(b.grad, ref_b.grad)
    expected = float(torch.cat([ref_a.grad.flatten(), ref_b.grad.flatten()]).norm())
    assert opt.grad_norm() == pytest.approx(expected, rel=1e-6)
    metrics = opt.step(HP)
    assert metrics["grad_norm"] == pytest.approx(expected, rel=1e-6)
    assert metrics["num_params_updated"] == 48
    # the step zeroed the buffer in place: the views stay, and hold nothing accumulated
    assert a.grad is view and not torch.count_nonzero(a.grad) and not opt.has_grad()
    torch_adamw([ref_a, ref_b]).step()
    torch.testing.assert_close(a.detach(), ref_a.detach(), atol=1e-6, rtol=0)
    # the next step's backward starts from zero in the same buffer
    opt.install_grad_views()
    assert a.grad is view
    ref_a.grad = ref_b.grad = None
    (x @ a.T @ b.T).sum().backward()
    (x @ ref_a.T @ ref_b.T).sum().backward()
    torch.testing.assert_close(a.grad, ref_a.grad)
    expected = float(torch.cat([ref_a.grad.flatten(), ref_b.grad.flatten()]).norm())
    assert opt.grad_norm() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("width", [400, 4001])
def test_norm_of_a_buffer_larger_than_the_caches_matches_float64(width: int) -> None:
    """The norm read from the flat buffer over ~200k or ~2M values (the second not a whole
    number of rows) spread across six orders of magnitude agrees with a float64 computation
    to 1e-6. One float32 dot product over the buffer missed it on an AVX-512 CPU: 1.4e-6 off
    at 200k values, 2e-5 at 2M."""
    gen = torch.Generator().manual_seed(3)
    shapes = {"big.lora_A.default.weight": (256, width), "big.lora_B.default.weight": (width, 256)}
    named = [(n, torch.nn.Parameter(torch.zeros(s))) for n, s in shapes.items()]
    opt = LoraAdamW(named)
    opt.install_grad_views()
    grads = [
        torch.randn(s, generator=gen) * 10.0 ** torch.randint(-3, 3, s, generator=gen)
        for s in shapes.values()
    ]
    for (_, p), g in zip(named, grads, strict=True):
        (p * g).sum().backward()
    expected = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    assert opt.grad_norm() == pytest.approx(expected, rel=1e-6)


def _backward(a: torch.nn.Parameter, b: torch.nn.Parameter, seed: int) -> None:
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(seed))
    (x @ a.T @ b.T).sum().backward()


def test_a_step_after_nothing_accumulated_in_the_views_leaves_weights() -> None:
    """After a step the views stay installed, zeroed; a second step with no backward in
    between, or after a backward whose gradients were put back, changes no weight (with
    momentum built up, an update on zero gradients would move them)."""
    named = make_params()
    (_, a), (_, b) = named
    opt = LoraAdamW(named)
    opt.install_grad_views()
    _backward(a, b, 1)
    assert opt.has_grad()
    opt.step(HP)
    assert not opt.has_grad()
    before = [p.detach().clone() for _, p in named]
    assert opt.step(HP)["num_params_updated"] == 0
    opt.install_grad_views()
    with pytest.raises(RuntimeError, match="chunk 2"):
        with opt.restored_on_error():
            _backward(a, b, 2)  # the first chunk accumulates...
            raise RuntimeError("chunk 2 is not finite")  # ...and the second fails
    assert not opt.has_grad() and not torch.count_nonzero(a.grad)
    assert opt.step(HP) == {"learning_rate": HP.learning_rate, "grad_norm": 0.0,
                            "num_params_updated": 0.0}  # fmt: skip
    for (_, p), p0 in zip(named, before, strict=True):
        assert torch.equal(p.detach(), p0)
    opt.install_grad_views()
    _backward(a, b, 3)  # a real backward in the same views still steps
    assert opt.step(HP)["num_params_updated"] == 48
    assert not torch.equal(a.detach(), before[0])


def test_gradients_set_another_way_next_to_the_views_count_as_accumulated() -> None:
    named = make_params()
    (_, a), (_, b) = named
    opt = LoraAdamW(named)
    opt.install_grad_views()
    opt.step(HP)  # nothing accumulated: the views stay, zeroed
    a.grad = torch.ones_like(a)  # replaced: no longer a view
    assert opt.has_grad()
    assert opt.step(HP)["num_params_updated"] == 48  # the group with a's gradient steps
    assert a.grad is None and b.grad is None  # not views: dropped, as before


def test_named_state_round_trip() -> None:
    """Each parameter's moments, cut out of its group's flat buffer, are torch.optim.AdamW's
    for that parameter alone (two matrices of different shapes per group, so a wrong slice
    shows), and they load back unchanged."""
    gen = torch.Generator().manual_seed(0)
    shapes = {
        "q.lora_A.w": (2, 3),
        "k.lora_A.w": (4, 3),
        "q.lora_B.w": (3, 2),
        "k.lora_B.w": (5, 4),
    }
    named = [(n, torch.nn.Parameter(torch.randn(s, generator=gen))) for n, s in shapes.items()]
    ref = [torch.nn.Parameter(p.detach().clone()) for _, p in named]
    ref_opt = torch_adamw(ref)
    opt = LoraAdamW(named)
    for step in range(2):
        for (_, p), q, g in zip(named, ref, grads_for(step, named), strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step(HP)
        ref_opt.step()
    saved = opt.named_state()
    assert {n: m.step for n, m in saved.items()} == {n: 2 for n, _ in named}
    for (name, _), q in zip(named, ref, strict=True):
        torch.testing.assert_close(saved[name].exp_avg, ref_opt.state[q]["exp_avg"])
        torch.testing.assert_close(saved[name].exp_avg_sq, ref_opt.state[q]["exp_avg_sq"])
    other = [(n, torch.nn.Parameter(torch.zeros(s))) for n, s in shapes.items()]
    restored = LoraAdamW(other)
    restored.load_named_state(saved, HP)
    again = restored.named_state()
    for name, m in saved.items():
        assert torch.equal(again[name].exp_avg, m.exp_avg)
        assert torch.equal(again[name].exp_avg_sq, m.exp_avg_sq)


def test_named_state_refuses_a_group_split_across_step_counts() -> None:
    """The A matrices step together in one buffer: state for only some of them, or at two
    step counts, cannot be loaded, and the check says so before anything changes."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"q.lora_A.w": (2, 3), "k.lora_A.w": (2, 3), "q.lora_B.w": (3, 2)}
    named = [(n, torch.nn.Parameter(torch.randn(s, generator=gen))) for n, s in shapes.items()]
    opt = LoraAdamW(named)
    zeros = {n: NamedMoments(3, torch.zeros(s), torch.zeros(s)) for n, s in shapes.items()}
    assert split_group_problem({n: 3 for n in shapes}, shapes) is None
    assert split_group_problem({"q.lora_B.w": 3}, shapes) is None  # a whole group, alone
    skewed = {**zeros, "k.lora_A.w": NamedMoments(4, torch.zeros(2, 3), torch.zeros(2, 3))}
    with pytest.raises(ValueError, match=r"2 of the 2 lora_A parameters, at step counts \[3, 4\]"):
        opt.load_named_state(skewed, None)
    partial = {n: m for n, m in zeros.items() if n != "k.lora_A.w"}
    with pytest.raises(ValueError, match=r"1 of the 2 lora_A parameters"):
        opt.load_named_state(partial, None)
    assert opt.named_state() == {}  # nothing was loaded
