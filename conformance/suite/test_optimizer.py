"""The optimizer, element by element, read back from the saved package's artifacts:
``optim_step`` against AdamW's closed form for the given learning rate, betas, eps and weight
decay; the gradient clip; ``load_state`` with and without the optimizer; the LoRA rank.

The SDK gives no call that returns adapter weights, but every save is a model package whose
artifacts live under its ``S3Uri`` (DescribeModelPackage), as on the real service: each test
saves with ``save_weights_for_sampler`` and reads the adapter's safetensors through
``Backend.package_files`` (conformance/artifacts.py). The scenarios are the Tinker suite's
too (conformance/optimizer_scenarios.py); :class:`SageMakerDriver` runs them here. Spec
tests: no capability gates them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from conformance import optimizer_scenarios as scenario
from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, result, sft
from conformance.suite_tinker._weights import Weights

#: The largest eps the service accepts (docs/wire.md#10): the clip scenario's.
MAX_EPS = 0.01


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


@dataclass
class SageMakerDriver:
    """The scenarios over ``sagemaker.train.training_session`` (scenario.Driver)."""

    backend: Backend
    new_training_client: Callable[..., Any]
    seed: int = 80

    def trainer(self, seed: int, rank: int | None = None) -> Any:
        if rank is None:
            return self.new_training_client(seed=seed)
        return self.new_training_client(rank=rank, alpha=2 * rank, seed=seed)

    def adam(self, **kw: Any) -> Any:
        kw.setdefault("weight_decay", 0.0)
        return self.backend.ts.AdamParams(**kw)

    def step(self, tc: Any, params: Any, grad: bool = True) -> None:
        weights = None if grad else [0.0] * len(TEXT_A)
        fb = tc.forward_backward([sft(self.backend.ts, TEXT_A, weights)], "cross_entropy")
        opt = tc.optim_step(params)
        result(fb, self.backend)
        result(opt, self.backend)

    def forward(self, tc: Any) -> None:
        result(tc.forward([sft(self.backend.ts, TEXT_A)], "cross_entropy"), self.backend)

    def adapter(self, tc: Any, name: str) -> Weights:
        return adapter(self.backend, tc, name)

    def save_state(self, tc: Any, name: str) -> str:
        return str(result(tc.save_state(name), self.backend).model_package_arn)

    def load_state(self, tc: Any, saved: str, *, optimizer: bool) -> None:
        load = tc.load_state_with_optimizer if optimizer else tc.load_state
        result(load(saved), self.backend)


def test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams.weight_decay`` (AdamW: decoupled): a step whose gradient is zero (fresh
    moments stay zero) leaves exactly ``w * (1 - lr * wd)``; a ``forward`` before it adds
    no gradient."""
    scenario.weight_decay(SageMakerDriver(backend, new_training_client))


def test_adamw_steps_follow_the_closed_form(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams`` (learning_rate, beta1, beta2, eps, weight_decay): one step on a real
    gradient, then two on a zero gradient, move each element by ``lr * F_t * sign(g)``
    beyond the decay, ``F_t`` from the betas alone: a doubled learning rate, swapped betas
    or a missing bias correction all move by another amount."""
    scenario.adamw_closed_form(SageMakerDriver(backend, new_training_client))


def test_grad_clip_norm_bounds_the_global_gradient_norm(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """``AdamParams.grad_clip_norm`` clips the global gradient norm to its value. Adam's
    first update is ``lr * g / (|g| + eps)`` per element, which gives each (clipped)
    gradient element back as ``eps * u / (lr - u)``: with the clip at eps / 10 (eps at the
    service's largest, 0.01), their global norm must be the clip."""
    scenario.clip_bounds_the_norm(SageMakerDriver(backend, new_training_client), MAX_EPS)


def test_load_state_resets_the_moments_and_with_optimizer_keeps_them(
    backend: Backend, new_training_client: Callable[..., Any]
) -> None:
    """TrainingClient ``load_state``: "leaves the optimizer freshly initialized";
    ``load_state_with_optimizer`` "also restores the optimizer state". After one real step
    saved, a zero-gradient step moves nothing after ``load_state`` (fresh moments) and
    ``lr * F_2`` after ``load_state_with_optimizer``; a real step after ``load_state``
    moves as fresh moments say: the optimizer steps the weights the model now uses."""
    scenario.load_state_moments(SageMakerDriver(backend, new_training_client))


@pytest.mark.parametrize("rank", [2, 8])
def test_the_adapter_has_the_requested_rank(
    backend: Backend, new_training_client: Callable[..., Any], rank: int
) -> None:
    """``create_lora_training_client(rank=...)``: the LoRA rank is the inner dimension of
    each saved ``lora_A`` / ``lora_B`` pair, whatever the package's metadata says."""
    scenario.adapter_rank(SageMakerDriver(backend, new_training_client), rank)
