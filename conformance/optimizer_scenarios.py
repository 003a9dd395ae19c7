"""The optimizer scenarios both suites run, each over a per-dialect :class:`Driver`:
``optim_step`` against AdamW's closed form for the given learning rate, betas, eps and weight
decay; decoupled weight decay; the gradient clip; ``load_state`` with and without the
optimizer; the LoRA rank. Every check reads the adapter back element by element (the
SageMaker driver from the saved package's S3 artifacts, the Tinker one through
``save_weights_external``), so nothing the service reports about itself is trusted.

``suite/test_optimizer.py`` and ``suite_tinker/test_tinker_optimizer.py`` keep one thin test
per scenario, whose docstring cites its own SDK's line (the spec point the self-check
names); the closed form and its helpers are ``suite_tinker/_weights.py``'s.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._weights import (
    Weights,
    adam_factors,
    check_update,
    decayed,
    flat,
    ulp,
)

#: Non-default betas (the SDKs' are 0.9 / 0.999 and 0.9 / 0.95): swapping them changes F_2
#: by half.
BETAS = (0.5, 0.8)
EPS = 1e-12


class Driver(Protocol):
    """One dialect's way to train and read back a session's adapter."""

    backend: Backend
    #: The seed of the first scenario's session; each scenario adds its own offset.
    seed: int

    def trainer(self, seed: int, rank: int | None = None) -> Any:
        """A new session (rank: the suite's default when None)."""

    def adam(self, **kw: Any) -> Any:
        """The dialect's ``AdamParams`` with ``kw``."""

    def step(self, tc: Any, params: Any, grad: bool = True) -> None:
        """forward_backward (``grad=False``: every weight 0, so the gradient is exactly 0),
        then optim_step, both submitted before either is waited for."""

    def forward(self, tc: Any) -> None:
        """A forward of one datum (no gradient)."""

    def adapter(self, tc: Any, name: str) -> Weights:
        """The session's LoRA tensors now (float64), saved as ``name``."""

    def save_state(self, tc: Any, name: str) -> str:
        """Save weights and optimizer; what ``load_state`` takes back (a path or an ARN)."""

    def load_state(self, tc: Any, saved: str, *, optimizer: bool) -> None:
        """``load_state`` (``optimizer``: ``load_state_with_optimizer``), waited for."""


def params(driver: Driver, **kw: Any) -> Any:
    kw.setdefault("learning_rate", driver.backend.limits.learning_rate)
    kw.setdefault("beta1", BETAS[0])
    kw.setdefault("beta2", BETAS[1])
    kw.setdefault("eps", EPS)
    return driver.adam(**kw)


def weight_decay(driver: Driver) -> None:
    """A zero-gradient step (fresh moments stay zero), after a ``forward`` that adds no
    gradient, leaves exactly ``w * (1 - lr * wd)``."""
    tc = driver.trainer(seed=driver.seed)
    lr, wd = driver.backend.limits.learning_rate, 0.5
    before = driver.adapter(tc, "opt-decay-0")
    driver.forward(tc)  # "without gradients": it must add nothing to the step below
    driver.step(tc, params(driver, weight_decay=wd), grad=False)
    after = flat(driver.adapter(tc, "opt-decay-1"))
    want = decayed(before, lr, wd)
    worst = float(np.abs(after - want).max())
    assert np.all(np.abs(after - want) <= ulp(want) + 1e-7 * lr), (
        f"AdamParams.weight_decay (AdamW, decoupled): after a forward and a zero-gradient step "
        f"with lr={lr:g}, wd={wd:g} the adapter is off w * (1 - lr * wd) by up to {worst:.3g}"
    )


def adamw_closed_form(driver: Driver) -> None:
    """One step on a real gradient, then two on a zero gradient, move each element by
    ``lr * F_t * sign(g)`` beyond the decay, ``F_t`` from the betas alone."""
    tc = driver.trainer(seed=driver.seed + 1)
    lr, wd = driver.backend.limits.learning_rate, 0.1
    step_params = params(driver, weight_decay=wd)
    previous = driver.adapter(tc, "opt-adam-0")
    sign = None
    for t, factor in enumerate(adam_factors([1, 0, 0], *BETAS), 1):
        driver.step(tc, step_params, grad=t == 1)
        now = driver.adapter(tc, f"opt-adam-{t}")
        want = decayed(previous, lr, wd)
        spec = (
            f"AdamW step {t} (lr={lr:g}, betas={BETAS}, eps={EPS:g}, weight_decay={wd:g}, "
            f"gradients 1, 0, 0 x g)"
        )
        sign = check_update(spec, want - flat(now), lr * factor, sign, ulp(want))
        previous = now


def clip_bounds_the_norm(driver: Driver, eps: float) -> None:
    """With the clip at eps / 10 every clipped gradient element is below eps, where Adam's
    first update ``u = lr * g / (|g| + eps)`` gives ``g = eps * u / (lr - u)`` back: their
    global norm must be the clip. A twin session (same seed) stepped unclipped shows the
    gradient is larger than the clip (some element moved more than lr / 2, so |g| > eps)."""
    lr = driver.backend.limits.learning_rate
    clip = eps / 10
    plain, clipped = driver.trainer(seed=driver.seed + 2), driver.trainer(seed=driver.seed + 2)
    start = flat(driver.adapter(plain, "opt-clip-0"))
    assert flat(driver.adapter(clipped, "opt-clip-1")) == pytest.approx(start)
    driver.step(plain, params(driver, eps=eps))
    unclipped = np.abs(start - flat(driver.adapter(plain, "opt-clip-2")))
    assert unclipped.max() > lr / 2, (
        f"unclipped, no element moved more than lr / 2 = {lr / 2:g}: every |g| < eps = "
        f"{eps:g}, too small for this test"
    )
    driver.step(clipped, params(driver, eps=eps, grad_clip_norm=clip))
    update = np.abs(start - flat(driver.adapter(clipped, "opt-clip-3")))
    assert np.all(update < lr / 2), (
        f"AdamParams.grad_clip_norm={clip:g}: an element moved {update.max():.4g}, as only a "
        f"gradient element above eps = {eps:g} can; clipped to {clip:g}, none is (clip ignored?)"
    )
    norm = float(np.linalg.norm(eps * update / (lr - update)))
    assert norm == pytest.approx(clip, rel=1e-2), (
        f"AdamParams.grad_clip_norm={clip:g}: the gradient the first update implies has "
        f"global norm {norm:.6g}, not the clip {clip:g}"
    )


def clip_scales_the_gradient(driver: Driver, eps: float) -> None:
    """With eps large the first update ``lr * g / (|g| + eps)`` stays below lr (an ignored
    eps moves elements by lr) and gives ``g`` back; a twin session (same seed) clipped to
    half the global norm must then move ``lr * (g/2) / (|g/2| + eps)``."""
    lr = driver.backend.limits.learning_rate
    plain, clipped = driver.trainer(seed=driver.seed + 2), driver.trainer(seed=driver.seed + 2)
    start = flat(driver.adapter(plain, "opt-clip-0"))
    driver.step(plain, params(driver, eps=eps))
    update = start - flat(driver.adapter(plain, "opt-clip-1"))
    assert np.all(np.abs(update) < lr), (
        f"AdamParams.eps={eps:g}: an element moved lr={lr:g} or more; lr * g / (|g| + eps) "
        "stays below lr (eps ignored?)"
    )
    grad = update * eps / (lr - np.abs(update))  # g from u = lr * g / (|g| + eps)
    norm = float(np.linalg.norm(grad))
    assert norm > 0.0, "the first step moved nothing"
    assert flat(driver.adapter(clipped, "opt-clip-2")) == pytest.approx(start)
    driver.step(clipped, params(driver, eps=eps, grad_clip_norm=norm / 2))
    got = start - flat(driver.adapter(clipped, "opt-clip-3"))
    want = lr * (grad / 2) / (np.abs(grad / 2) + eps)
    scale = float(np.abs(want).max())
    ratio = float(np.median(got[update != 0] / update[update != 0]))
    assert np.abs(got - want).max() <= 2e-3 * scale + 1e-9, (
        f"AdamParams.grad_clip_norm={norm / 2:.6g} (half the global gradient norm {norm:.6g}): "
        f"the update is off lr * (g/2) / (|g/2| + eps) by up to {np.abs(got - want).max():.3g} "
        f"of {scale:.3g} (median ratio to the unclipped update: {ratio:.3g})"
    )


def load_state_moments(driver: Driver) -> None:
    """After one real step saved, a zero-gradient step moves nothing after ``load_state``
    (fresh moments) and ``lr * F_2`` after ``load_state_with_optimizer``; a real step after
    ``load_state`` moves as fresh moments say: the optimizer steps the weights the model
    now uses."""
    tc = driver.trainer(seed=driver.seed + 3)
    lr = driver.backend.limits.learning_rate
    step_params = params(driver)
    first, second = adam_factors([1, 0], *BETAS)
    before = flat(driver.adapter(tc, "opt-load-0"))
    driver.step(tc, step_params)
    saved = flat(driver.adapter(tc, "opt-load-1"))
    sign = check_update("AdamW first step", before - saved, lr * first, None, ulp(before))
    state = driver.save_state(tc, "opt-load")
    driver.step(tc, step_params)  # moves on, so that each load has work to undo

    driver.load_state(tc, state, optimizer=False)
    driver.step(tc, step_params, grad=False)
    now = flat(driver.adapter(tc, "opt-load-2"))
    assert np.all(np.abs(now - saved) <= ulp(saved) + 1e-7 * lr), (
        "load_state loads the weights with a freshly initialized optimizer: a zero-gradient "
        f"step after it must move nothing, but elements moved up to "
        f"{np.abs(now - saved).max():.3g} (the old Adam moments were kept?)"
    )
    driver.step(tc, step_params)
    after = flat(driver.adapter(tc, "opt-load-3"))
    fresh = adam_factors([0, 1], *BETAS)[1]  # the zero step counts for bias correction
    check_update(
        f"load_state, then a zero-gradient and a real step: fresh moments give lr * F = "
        f"{lr * fresh:.4g} on the weights the model now uses",
        now - after,
        lr * fresh,
        None,
        ulp(now),
    )

    driver.load_state(tc, state, optimizer=True)
    driver.step(tc, step_params, grad=False)
    resumed = flat(driver.adapter(tc, "opt-load-4"))
    check_update(
        f"load_state_with_optimizer, then a zero-gradient step: lr * F_2 = {lr * second:.4g} "
        "with the saved moments",
        saved - resumed,
        lr * second,
        sign,
        ulp(saved),
    )


def adapter_rank(driver: Driver, rank: int) -> None:
    """Each saved ``lora_A`` / ``lora_B`` pair meets in a dimension of ``rank``: ``(rank, in)``
    and ``(out, rank)`` in PEFT's layout (every update ``B @ A`` has rank at most ``rank``),
    or the transposed pair of a model that computes ``A @ B``; whatever the service reports
    about itself."""
    tc = driver.trainer(seed=driver.seed + 4, rank=rank)
    driver.step(tc, params(driver))
    weights = driver.adapter(tc, f"opt-rank-{rank}")
    pairs = {key.replace("lora_A", "lora_B") for key in weights if "lora_A" in key}
    assert pairs and pairs <= set(weights), f"no lora_A/lora_B pairs in {sorted(weights)[:6]}"
    for b_key in sorted(pairs):
        a, b = weights[b_key.replace("lora_B", "lora_A")], weights[b_key]
        peft = a.shape[0] == rank and b.shape[1] == rank  # B @ A: (out, r) @ (r, in)
        transposed = a.shape[-1] == rank and b.shape[0] == rank  # A @ B: (in, r) @ (r, out)
        assert peft or transposed, (
            f"LoRA rank={rank}: {b_key} is {b.shape} and its lora_A {a.shape}; neither "
            f"product B @ A nor A @ B runs through a dimension of {rank}"
        )
