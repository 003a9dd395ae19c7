"""The optimizer, element by element: ``optim_step`` against AdamW's closed form for the
given learning rate, betas, eps, weight decay and gradient clip; ``load_state`` with and
without the optimizer; the LoRA rank. Each test downloads the adapter
(``save_weights_external`` + ``get_external_weights_urls``, see ``_weights.py``) and needs no
capability: optimizer.py's ``AdamParams`` documents every field it checks. The scenarios
are the SageMaker suite's too (conformance/optimizer_scenarios.py); :class:`TinkerDriver`
runs them here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from conformance import optimizer_scenarios as scenario
from conformance.adapter import Backend
from conformance.suite_tinker._kit import datum, forward, wait
from conformance.suite_tinker._weights import Weights, adapter

#: The clip scenario's eps: large, so that Adam's first update gives the gradient back.
CLIP_EPS = 1.0


@dataclass
class TinkerDriver:
    """The scenarios over the tinker SDK (scenario.Driver)."""

    backend: Backend
    tinker_client: Any
    new_trainer: Callable[..., Any]
    tokens: list[int]
    seed: int = 70

    def trainer(self, seed: int, rank: int | None = None) -> Any:
        return (
            self.new_trainer(seed=seed) if rank is None else self.new_trainer(rank=rank, seed=seed)
        )

    def adam(self, **kw: Any) -> Any:
        return self.backend.ts.types.AdamParams(**kw)

    def step(self, tc: Any, params: Any, grad: bool = True) -> None:
        # weights always sent: the SDK names them an input of cross_entropy (TuFT refuses a
        # datum without them); weights of 1 give the same gradient as none
        weights = [1.0 if grad else 0.0] * (len(self.tokens) - 1)
        fb = tc.forward_backward(
            [datum(self.backend, self.tokens, weights=weights)], "cross_entropy"
        )
        opt = tc.optim_step(params)
        wait(fb, self.backend)
        wait(opt, self.backend)

    def forward(self, tc: Any) -> None:
        forward(self.backend, tc, [datum(self.backend, self.tokens)])

    def adapter(self, tc: Any, name: str) -> Weights:
        return adapter(self.backend, self.tinker_client, tc, name)

    def save_state(self, tc: Any, name: str) -> str:
        return str(wait(tc.save_state(name), self.backend).path)

    def load_state(self, tc: Any, saved: str, *, optimizer: bool) -> None:
        load = tc.load_state_with_optimizer if optimizer else tc.load_state
        wait(load(saved), self.backend)


def _driver(backend: Backend, tinker_client: Any, new_trainer: Any, tokens: list[int]) -> Any:
    return TinkerDriver(backend, tinker_client, new_trainer, tokens)


def test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams.weight_decay``: "Uses decoupled weight decay": a step whose
    gradient is zero (fresh moments stay zero) leaves exactly ``w * (1 - lr * wd)``; a
    ``forward`` before it adds nothing (training_client.py ``forward``: "Compute forward
    pass without gradients")."""
    scenario.weight_decay(_driver(backend, tinker_client, new_trainer, tokens))


def test_adamw_steps_follow_the_closed_form(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams`` (learning_rate, beta1, beta2, eps, weight_decay): one step
    on a real gradient, then two on a zero gradient, move each element by
    ``lr * F_t * sign(g)`` beyond the decay, ``F_t`` from the betas alone (``_weights.py``):
    a doubled learning rate, swapped betas or a missing bias correction all move by another
    amount."""
    scenario.adamw_closed_form(_driver(backend, tinker_client, new_trainer, tokens))


def test_grad_clip_norm_scales_the_global_gradient(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """optimizer.py ``AdamParams.grad_clip_norm``: "If the global gradient norm is greater
    than this value, it will be clipped to this value"; and ``eps``, "added to the
    denominator". With eps large the first update is ``lr * g / (|g| + eps)``, which gives
    ``g`` back; a twin trainer (same ``seed``) clipped to half the global norm must then move
    ``lr * (g/2) / (|g/2| + eps)``."""
    driver = _driver(backend, tinker_client, new_trainer, tokens)
    scenario.clip_scales_the_gradient(driver, CLIP_EPS)


def test_load_state_resets_the_moments_and_with_optimizer_keeps_them(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``load_state``: "This loads only the model weights, not optimizer
    state (e.g., Adam momentum)", and ``load_state_with_optimizer`` loads both. After one
    real step saved, a zero-gradient step moves nothing after ``load_state`` (fresh moments)
    and ``lr * F_2`` after ``load_state_with_optimizer``; a real step after ``load_state``
    moves as fresh moments say: the optimizer steps the weights the model now uses."""
    scenario.load_state_moments(_driver(backend, tinker_client, new_trainer, tokens))


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
    scenario.adapter_rank(_driver(backend, tinker_client, new_trainer, tokens), rank)
