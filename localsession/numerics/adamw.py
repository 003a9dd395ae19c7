"""AdamW written out in tensor ops, for small models that should not pay for ``torch.optim``.

Building a ``torch.optim.AdamW`` imports ``torch._dynamo`` (about a second, more on a busy
machine). :class:`PlainAdamW` computes the same update (``torch.optim.AdamW``'s default,
single-tensor algorithm: decoupled weight decay, bias-corrected moments) with a handful of
tensor ops per parameter, and offers :class:`~localsession.numerics.optim.LoraAdamW`'s
interface (LoRA+ on ``lora_B`` parameters, global-norm clipping, the metrics of
docs/semantics.md#2, named moments for checkpoints). The fakes' numeric engine uses it; the
torch engine keeps ``torch.optim.AdamW`` (fused kernels on large adapters).

Per parameter ``p`` with gradient ``g`` at step ``t`` (after clipping):

    p ← p · (1 − lr · wd)
    m ← β1 · m + (1 − β1) · g
    v ← β2 · v + (1 − β2) · g²
    p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + eps)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

from localsession import vocab
from localsession.numerics.optim import NamedMoments, clip_grads_, global_grad_norm, is_lora_b
from localsession.port import AdamHyperparams


class PlainAdamW:
    """AdamW over named trainable parameters, per-step hyperparameters and LoRA+."""

    def __init__(self, named_params: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        named = [(n, p) for n, p in named_params if p.requires_grad]
        if not named:
            raise ValueError("PlainAdamW: no trainable parameters")
        self.names: list[str] = [n for n, _ in named]
        self.params: list[torch.nn.Parameter] = [p for _, p in named]
        #: name -> (step, exp_avg, exp_avg_sq); absent until the parameter's first update.
        self.state: dict[str, NamedMoments] = {}
        #: The hyperparameters of the last ``step`` call (``None`` before the first).
        self.last_params: AdamHyperparams | None = None

    def has_grad(self) -> bool:
        """Whether any gradient has been accumulated since the last step."""
        return any(p.grad is not None for p in self.params)

    def zero_grad(self) -> None:
        """Drop the accumulated gradients."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, hp: AdamHyperparams) -> dict[str, float]:
        """Clip, apply and zero the accumulated gradients; return the step's metrics."""
        hp.check()
        self.last_params = hp
        grads = [p.grad for p in self.params if p.grad is not None]
        metrics: dict[str, float] = {
            vocab.Metric.LEARNING_RATE: hp.learning_rate,
            vocab.Metric.GRAD_NORM: 0.0,
            vocab.Metric.NUM_PARAMS_UPDATED: 0.0,
        }
        if not grads:
            return metrics
        total_norm = global_grad_norm(grads)
        norm = float(total_norm)
        metrics[vocab.Metric.GRAD_NORM] = norm if math.isfinite(norm) else 0.0
        if hp.learning_rate == 0.0:  # the weights stay bit-identical
            self.zero_grad()
            return metrics
        if hp.grad_clip_norm is not None and hp.grad_clip_norm > 0:
            clip_grads_(grads, hp.grad_clip_norm, total_norm)
        ratio = hp.lora_plus_lr_ratio if hp.lora_plus_lr_ratio is not None else 1.0
        updated = 0
        for name, p in zip(self.names, self.params, strict=True):
            if p.grad is None:
                continue
            lr = hp.learning_rate * (ratio if is_lora_b(name) else 1.0)
            self.state[name] = self._update(p, p.grad, self.state.get(name), hp, lr)
            updated += p.numel()
        metrics[vocab.Metric.NUM_PARAMS_UPDATED] = float(updated)
        self.zero_grad()
        return metrics

    @staticmethod
    def _update(
        p: Tensor, g: Tensor, state: NamedMoments | None, hp: AdamHyperparams, lr: float
    ) -> NamedMoments:
        step = (state.step if state is not None else 0) + 1
        m = state.exp_avg if state is not None else torch.zeros_like(p)
        v = state.exp_avg_sq if state is not None else torch.zeros_like(p)
        p.mul_(1.0 - lr * hp.weight_decay)
        m.lerp_(g, 1.0 - hp.beta1)
        v.mul_(hp.beta2).addcmul_(g, g, value=1.0 - hp.beta2)
        bias1 = 1.0 - hp.beta1**step
        bias2_sqrt = math.sqrt(1.0 - hp.beta2**step)
        denom = (v.sqrt() / bias2_sqrt).add_(hp.eps)
        p.addcdiv_(m, denom, value=-lr / bias1)
        return NamedMoments(step, m, v)

    def named_state(self) -> dict[str, NamedMoments]:
        """A copy of every parameter's state, keyed by name (never-stepped ones left out)."""
        return {
            name: NamedMoments(s.step, s.exp_avg.clone(), s.exp_avg_sq.clone())
            for name, s in self.state.items()
        }

    def load_named_state(
        self, moments: Mapping[str, NamedMoments], last_params: AdamHyperparams | None
    ) -> None:
        """Replace the whole state with ``moments`` (names and shapes checked by the caller);
        drops accumulated gradients."""
        by_name = dict(zip(self.names, self.params, strict=True))
        self.state = {
            name: NamedMoments(
                m.step,
                m.exp_avg.to(dtype=by_name[name].dtype, copy=True),
                m.exp_avg_sq.to(dtype=by_name[name].dtype, copy=True),
            )
            for name, m in moments.items()
            if name in by_name
        }
        self.last_params = last_params
        self.zero_grad()
