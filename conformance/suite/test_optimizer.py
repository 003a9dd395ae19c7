"""The optimizer, element by element, read back from the saved package's artifacts:
``optim_step`` against AdamW's closed form for the given learning rate, betas, eps and weight
decay; the gradient clip; ``load_state`` with and without the optimizer; the LoRA rank.

The SDK gives no call that returns adapter weights, but every save is a model package whose
artifacts live under its ``S3Uri`` (DescribeModelPackage), as on the real service: each test
saves with ``save_weights_for_sampler`` and reads the adapter's safetensors through
``Backend.package_files`` (conformance/artifacts.py). The closed form and its helpers are the
Tinker suite's (suite_tinker/_weights.py). Spec tests: no capability gates them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, result, sft
from conformance.suite_tinker._weights import (
    Weights,
    adam_factors,
    check_update,
    decayed,
    flat,
    ulp,
)

#: Non-default betas (the SDK's are 0.9 / 0.999): swapping them changes F_2 by half.
BETAS = (0.5, 0.8)
EPS = 1e-12


def adapter(backend: Backend, tc: Any, name: str) -> Weights:
    """The session's LoRA tensors now (float64): ``save_weights_for_sampler`` and the
    adapter safetensors among the package's artifacts."""
    from safetensors.numpy import load

    arn = result(tc.save_weights_for_sampler(name), backend).model_package_arn
    try:
        files = backend.package_files(arn)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the artifacts is the finding
        pytest.fail(
            f"the artifacts of {arn} could not be read from the S3Uri DescribeModelPackage "
            f"names ({type(exc).__name__}: {exc}); a saved package's files live in S3"
        )
    names = [
        path
        for path in files
        if path.endswith(".safetensors") and "adapter" in path.rsplit("/", 1)[-1]
    ]
    assert len(names) == 1, f"the artifacts of {arn} hold no single adapter file: {sorted(files)}"
    tensors = load(files[names[0]])
    assert tensors, f"{names[0]} of {arn} holds no tensor"
    return {key: value.astype(np.float64) for key, value in tensors.items()}


def _params(backend: Backend, **kw: Any) -> Any:
    kw.setdefault("learning_rate", backend.limits.learning_rate)
    kw.setdefault("beta1", BETAS[0])
    kw.setdefault("beta2", BETAS[1])
    kw.setdefault("eps", EPS)
    kw.setdefault("weight_decay", 0.0)
    return backend.ts.AdamParams(**kw)


def _step(backend: Backend, tc: Any, params: Any, grad: bool = True) -> None:
    """forward_backward (``grad=False``: every weight 0, so the gradient is exactly 0), then
    optim_step, both submitted before either is waited for."""
    weights = None if grad else [0.0] * len(TEXT_A)
    fb = tc.forward_backward([sft(backend.ts, TEXT_A, weights)], "cross_entropy")
    opt = tc.optim_step(params)
    result(fb, backend)
    result(opt, backend)


def test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams.weight_decay`` (AdamW: decoupled): a step whose gradient is zero (fresh
    moments stay zero) leaves exactly ``w * (1 - lr * wd)``."""
    tc = new_training_client(seed=80)
    lr, wd = backend.limits.learning_rate, 0.5
    before = adapter(backend, tc, "opt-decay-0")
    _step(backend, tc, _params(backend, weight_decay=wd), grad=False)
    after = flat(adapter(backend, tc, "opt-decay-1"))
    want = decayed(before, lr, wd)
    worst = float(np.abs(after - want).max())
    assert np.all(np.abs(after - want) <= ulp(want) + 1e-7 * lr), (
        f"AdamParams.weight_decay (AdamW, decoupled): after a zero-gradient step with "
        f"lr={lr:g}, wd={wd:g} the adapter is off w * (1 - lr * wd) by up to {worst:.3g}"
    )


def test_adamw_steps_follow_the_closed_form(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams`` (learning_rate, beta1, beta2, eps, weight_decay): one step on a real
    gradient, then two on a zero gradient, move each element by ``lr * F_t * sign(g)``
    beyond the decay, ``F_t`` from the betas alone: a doubled learning rate, swapped betas
    or a missing bias correction all move by another amount."""
    tc = new_training_client(seed=81)
    lr, wd = backend.limits.learning_rate, 0.1
    params = _params(backend, weight_decay=wd)
    previous = adapter(backend, tc, "opt-adam-0")
    sign = None
    for t, factor in enumerate(adam_factors([1, 0, 0], *BETAS), 1):
        _step(backend, tc, params, grad=t == 1)
        now = adapter(backend, tc, f"opt-adam-{t}")
        want = decayed(previous, lr, wd)
        spec = (
            f"AdamW step {t} (lr={lr:g}, betas={BETAS}, eps={EPS:g}, weight_decay={wd:g}, "
            f"gradients 1, 0, 0 x g)"
        )
        sign = check_update(spec, want - flat(now), lr * factor, sign, ulp(want))
        previous = now


def test_grad_clip_norm_bounds_the_global_gradient_norm(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams.grad_clip_norm`` clips the global gradient norm to its value. Adam's
    first update is ``lr * g / (|g| + eps)`` per element, which gives each (clipped)
    gradient element back as ``eps * u / (lr - u)``: with the clip at eps / 10, their
    global norm must be the clip. A twin session (same seed) stepped unclipped shows the
    gradient is larger than the clip (some element moved more than lr / 2, so |g| > eps)."""
    lr, eps = backend.limits.learning_rate, 0.01  # the largest eps the service accepts
    clip = eps / 10
    plain, clipped = new_training_client(seed=82), new_training_client(seed=82)
    start = flat(adapter(backend, plain, "opt-clip-0"))
    assert flat(adapter(backend, clipped, "opt-clip-1")) == pytest.approx(start)
    _step(backend, plain, _params(backend, eps=eps))
    unclipped = np.abs(start - flat(adapter(backend, plain, "opt-clip-2")))
    assert unclipped.max() > lr / 2, (
        f"unclipped, no element moved more than lr / 2 = {lr / 2:g}: every |g| < eps = "
        f"{eps:g}, too small for this test"
    )
    _step(backend, clipped, _params(backend, eps=eps, grad_clip_norm=clip))
    update = np.abs(start - flat(adapter(backend, clipped, "opt-clip-3")))
    assert np.all(update < lr / 2), (
        f"AdamParams.grad_clip_norm={clip:g}: an element moved {update.max():.4g}, as only a "
        f"gradient element above eps = {eps:g} can; clipped to {clip:g}, none is (clip ignored?)"
    )
    norm = float(np.linalg.norm(eps * update / (lr - update)))
    assert norm == pytest.approx(clip, rel=1e-2), (
        f"AdamParams.grad_clip_norm={clip:g}: the gradient the first update implies has "
        f"global norm {norm:.6g}, not the clip {clip:g}"
    )


def test_load_state_resets_the_moments_and_with_optimizer_keeps_them(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """TrainingClient ``load_state``: "leaves the optimizer freshly initialized";
    ``load_state_with_optimizer`` "also restores the optimizer state". After one real step
    saved, a zero-gradient step moves nothing after ``load_state`` (fresh moments) and
    ``lr * F_2`` after ``load_state_with_optimizer``; a real step after ``load_state``
    moves as fresh moments say: the optimizer steps the weights the model now uses."""
    tc = new_training_client(seed=83)
    lr = backend.limits.learning_rate
    params = _params(backend)
    first, second = adam_factors([1, 0], *BETAS)
    before = flat(adapter(backend, tc, "opt-load-0"))
    _step(backend, tc, params)
    saved = flat(adapter(backend, tc, "opt-load-1"))
    sign = check_update("AdamW first step", before - saved, lr * first, None, ulp(before))
    arn = result(tc.save_state("opt-load"), backend).model_package_arn
    _step(backend, tc, params)  # moves on, so that each load has work to undo

    result(tc.load_state(arn), backend)
    _step(backend, tc, params, grad=False)
    now = flat(adapter(backend, tc, "opt-load-2"))
    assert np.all(np.abs(now - saved) <= ulp(saved) + 1e-7 * lr), (
        "load_state leaves the optimizer freshly initialized: a zero-gradient step after it "
        f"must move nothing, but elements moved up to {np.abs(now - saved).max():.3g} "
        "(the old Adam moments were kept?)"
    )
    _step(backend, tc, params)
    after = flat(adapter(backend, tc, "opt-load-3"))
    fresh = adam_factors([0, 1], *BETAS)[1]  # the zero step counts for bias correction
    check_update(
        f"load_state, then a zero-gradient and a real step: fresh moments give lr * F = "
        f"{lr * fresh:.4g} on the weights the model now uses",
        now - after,
        lr * fresh,
        None,
        ulp(now),
    )

    result(tc.load_state_with_optimizer(arn), backend)
    _step(backend, tc, params, grad=False)
    resumed = flat(adapter(backend, tc, "opt-load-4"))
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
    backend: Backend, new_training_client: Callable[..., Any], rank: int
) -> None:
    """``create_lora_training_client(rank=...)``: the LoRA rank is the inner dimension of
    each saved ``lora_A`` / ``lora_B`` pair (the smaller dimension of each), whatever the
    package's metadata says."""
    tc = new_training_client(rank=rank, alpha=2 * rank, seed=84)
    _step(backend, tc, _params(backend))
    weights = adapter(backend, tc, f"opt-rank-{rank}")
    pairs = {key.replace("lora_A", "lora_B") for key in weights if "lora_A" in key}
    assert pairs and pairs <= set(weights), f"no lora_A/lora_B pairs in {sorted(weights)[:6]}"
    for b_key in sorted(pairs):
        a, b = weights[b_key.replace("lora_B", "lora_A")], weights[b_key]
        assert min(a.shape) == rank and min(b.shape) == rank, (
            f"rank={rank}: {b_key} is {b.shape} and its lora_A {a.shape}"
        )
