"""The optimizer, element by element: ``optim_step`` against AdamW's closed form for the
given learning rate, betas, eps, weight decay and gradient clip; ``load_state`` with and
without the optimizer; the LoRA rank. Each test downloads the adapter
(``save_weights_external`` + ``get_external_weights_urls``, see ``_weights.py``) and needs no
capability: optimizer.py's ``AdamParams`` documents every field it checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import datum, forward, wait
from conformance.suite_tinker._weights import (
    adam_factors,
    adapter,
    check_update,
    decayed,
    flat,
    ulp,
)

#: Non-default betas (the SDK's are 0.9 / 0.95): swapping them changes F_2 by half.
BETAS = (0.5, 0.8)
EPS = 1e-12


def _params(backend: Backend, **kw: Any) -> Any:
    kw.setdefault("learning_rate", backend.limits.learning_rate)
    kw.setdefault("beta1", BETAS[0])
    kw.setdefault("beta2", BETAS[1])
    kw.setdefault("eps", EPS)
    return backend.ts.types.AdamParams(**kw)


def _step(backend: Backend, tc: Any, tokens: list[int], params: Any, grad: bool = True) -> None:
    """forward_backward (``grad=False``: every weight 0, so the gradient is exactly 0), then
    optim_step, both submitted before either is waited for. The weights are always sent:
    the SDK's losses name ``weights`` an input of ``cross_entropy``, and a server may refuse
    a datum without them (TuFT: "Missing 'weights' in loss_fn_inputs")."""
    weights = [1.0 if grad else 0.0] * (len(tokens) - 1)
    fb = tc.forward_backward([datum(backend, tokens, weights=weights)], "cross_entropy")
    opt = tc.optim_step(params)
    wait(fb, backend)
    wait(opt, backend)


def test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams.weight_decay``: "Uses decoupled weight decay": a step whose
    gradient is zero (fresh moments stay zero) leaves exactly ``w * (1 - lr * wd)``; a
    ``forward`` before it adds nothing (training_client.py ``forward``: "Compute forward
    pass without gradients")."""
    tc = new_trainer(seed=70)
    lr, wd = backend.limits.learning_rate, 0.5
    before = adapter(backend, tinker_client, tc, "opt-decay-0")
    forward(backend, tc, [datum(backend, tokens)])  # "without gradients"
    _step(backend, tc, tokens, _params(backend, weight_decay=wd), grad=False)
    after = flat(adapter(backend, tinker_client, tc, "opt-decay-1"))
    want = decayed(before, lr, wd)
    worst = float(np.abs(after - want).max())
    assert np.all(np.abs(after - want) <= ulp(want) + 1e-7 * lr), (
        f"AdamParams.weight_decay (decoupled): after a zero-gradient step with lr={lr:g}, "
        f"wd={wd:g} the adapter is off w * (1 - lr * wd) by up to {worst:.3g}"
    )


def test_adamw_steps_follow_the_closed_form(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams`` (learning_rate, beta1, beta2, eps, weight_decay): one step
    on a real gradient, then two on a zero gradient, move each element by
    ``lr * F_t * sign(g)`` beyond the decay, ``F_t`` from the betas alone (``_weights.py``):
    a doubled learning rate, swapped betas or a missing bias correction all move by another
    amount."""
    tc = new_trainer(seed=71)
    lr, wd = backend.limits.learning_rate, 0.1
    params = _params(backend, weight_decay=wd)
    factors = adam_factors([1, 0, 0], *BETAS)
    previous = adapter(backend, tinker_client, tc, "opt-adam-0")
    sign = None
    for t, factor in enumerate(factors, 1):
        _step(backend, tc, tokens, params, grad=t == 1)
        now = adapter(backend, tinker_client, tc, f"opt-adam-{t}")
        want = decayed(previous, lr, wd)
        spec = (
            f"AdamW step {t} (lr={lr:g}, betas={BETAS}, eps={EPS:g}, weight_decay={wd:g}, "
            f"gradients 1, 0, 0 x g)"
        )
        sign = check_update(spec, want - flat(now), lr * factor, sign, ulp(want))
        previous = now


def test_grad_clip_norm_scales_the_global_gradient(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams.grad_clip_norm``: "If the global gradient norm is greater
    than this value, it will be clipped to this value"; and ``eps``, "added to the
    denominator". With eps large the first update is ``lr * g / (|g| + eps)``, which gives
    ``g`` back; a twin trainer (same ``seed``) clipped to half the global norm must then move
    ``lr * (g/2) / (|g/2| + eps)``."""
    lr, eps = backend.limits.learning_rate, 1.0
    plain, clipped = new_trainer(seed=72), new_trainer(seed=72)
    start = flat(adapter(backend, tinker_client, plain, "opt-clip-0"))
    _step(backend, plain, tokens, _params(backend, eps=eps))
    update = start - flat(adapter(backend, tinker_client, plain, "opt-clip-1"))
    assert np.all(np.abs(update) < lr), (
        f"AdamParams.eps={eps:g}: an element moved lr={lr:g} or more; lr * g / (|g| + eps) "
        "stays below lr (eps ignored?)"
    )
    grad = update * eps / (lr - np.abs(update))  # g from u = lr * g / (|g| + eps)
    norm = float(np.linalg.norm(grad))
    assert norm > 0.0, "the first step moved nothing"
    assert flat(adapter(backend, tinker_client, clipped, "opt-clip-2")) == pytest.approx(start)
    _step(backend, clipped, tokens, _params(backend, eps=eps, grad_clip_norm=norm / 2))
    got = start - flat(adapter(backend, tinker_client, clipped, "opt-clip-3"))
    want = lr * (grad / 2) / (np.abs(grad / 2) + eps)
    scale = float(np.abs(want).max())
    ratio = float(np.median(got[update != 0] / update[update != 0]))
    assert np.abs(got - want).max() <= 2e-3 * scale + 1e-9, (
        f"AdamParams.grad_clip_norm={norm / 2:.6g} (half the global gradient norm {norm:.6g}): "
        f"the update is off lr * (g/2) / (|g/2| + eps) by up to {np.abs(got - want).max():.3g} "
        f"of {scale:.3g} (median ratio to the unclipped update: {ratio:.3g})"
    )


def test_load_state_resets_the_moments_and_with_optimizer_keeps_them(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``load_state``: "This loads only the model weights, not optimizer
    state (e.g., Adam momentum)", and ``load_state_with_optimizer`` loads both. After one
    real step saved, a zero-gradient step moves nothing after ``load_state`` (fresh moments)
    and ``lr * F_2`` after ``load_state_with_optimizer``; a real step after ``load_state``
    moves as fresh moments say: the optimizer steps the weights the model now uses."""
    tc = new_trainer(seed=73)
    lr = backend.limits.learning_rate
    params = _params(backend)
    first, second = adam_factors([1, 0], *BETAS)
    before = flat(adapter(backend, tinker_client, tc, "opt-load-0"))
    _step(backend, tc, tokens, params)
    saved_w = adapter(backend, tinker_client, tc, "opt-load-1")
    saved = flat(saved_w)
    sign = check_update("AdamW first step", before - saved, lr * first, None, ulp(before))
    path = wait(tc.save_state("opt-load"), backend).path
    _step(backend, tc, tokens, params)  # moves on, so that each load has work to undo

    wait(tc.load_state(path), backend)
    _step(backend, tc, tokens, params, grad=False)
    now = flat(adapter(backend, tinker_client, tc, "opt-load-2"))
    assert np.all(np.abs(now - saved) <= ulp(saved) + 1e-7 * lr), (
        "load_state loads the weights only, with fresh optimizer state: a zero-gradient step "
        f"after it must move nothing, but elements moved up to {np.abs(now - saved).max():.3g} "
        "(the old Adam moments were kept?)"
    )
    _step(backend, tc, tokens, params)
    after = flat(adapter(backend, tinker_client, tc, "opt-load-3"))
    fresh = adam_factors([0, 1], *BETAS)[1]  # the zero step counts for bias correction
    check_update(
        f"load_state, then a zero-gradient and a real step: fresh moments give lr * F = "
        f"{lr * fresh:.4g} on the weights the model now uses",
        now - after,
        lr * fresh,
        None,
        ulp(now),
    )

    wait(tc.load_state_with_optimizer(path), backend)
    _step(backend, tc, tokens, params, grad=False)
    resumed = flat(adapter(backend, tinker_client, tc, "opt-load-4"))
    check_update(
        f"load_state_with_optimizer, then a zero-gradient step: lr * F_2 = {lr * second:.4g} "
        "with the saved moments",
        saved - resumed,
        lr * second,
        sign,
        ulp(saved),
    )


@pytest.mark.parametrize("rank", [2, 8])
def test_the_adapter_has_the_requested_rank(
    backend: Backend,
    tinker_client: Any,
    new_trainer: Callable[..., Any],
    tokens: list[int],
    rank: int,
) -> None:
    """lora_config.py ``LoraConfig.rank``: "LoRA rank (dimension of low-rank matrices)": each
    downloaded ``lora_A`` is ``(rank, in)`` and each ``lora_B`` ``(out, rank)`` (so every
    update ``B @ A`` has rank at most ``rank``), whatever the service reports about itself."""
    tc = new_trainer(rank=rank, seed=74)
    _step(backend, tc, tokens, _params(backend))
    weights = adapter(backend, tinker_client, tc, f"opt-rank-{rank}")
    pairs = {key.replace("lora_A", "lora_B") for key in weights if "lora_A" in key}
    assert pairs and pairs <= set(weights), f"no lora_A/lora_B pairs in {sorted(weights)[:6]}"
    for b_key in sorted(pairs):
        a, b = weights[b_key.replace("lora_B", "lora_A")], weights[b_key]
        assert a.shape[0] == rank and b.shape[1] == rank, (
            f"LoraConfig.rank={rank}: {b_key} is {b.shape} and its lora_A {a.shape}"
        )
