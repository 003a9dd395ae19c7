"""The optimizer step of docs/semantics.md#2: AdamW over the LoRA parameters.

- Decoupled weight decay and bias correction, i.e. exactly ``torch.optim.AdamW`` (fused where
  torch supports it on the device, else ``foreach``), with the hyperparameters of *this* step
  set on the param groups: group 0 holds the LoRA A matrices (and any other trainable
  parameter), group 1 the LoRA B matrices, whose learning rate is multiplied by
  ``loraPlusLrRatio`` (LoRA+).
- ``gradClipNorm > 0`` clips by the global L2 norm before the update; the ``grad_norm``
  metric is always the norm *before* clipping.
- Gradients accumulate across ``forward_backward`` calls; ``step`` applies and zeroes them.
  With nothing accumulated, or with ``learningRate == 0``, the weights stay bit-identical
  (the update is skipped; gradients are still zeroed).
- Checkpoints: ``named_state`` / ``load_named_state`` move the moments and step counts keyed
  by parameter name (the checkpoint files' layout), so a restored optimizer resumes bit for
  bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from localsession.port import AdamHyperparams

__all__ = [
    "AdamHyperparams",
    "LoraAdamW",
    "NamedMoments",
    "clip_grads_",
    "global_grad_norm",
    "is_lora_b",
]


def is_lora_b(name: str) -> bool:
    """Whether a parameter name is a LoRA B matrix (peft naming: ``...lora_B.<adapter>...``)."""
    return ".lora_B." in name or name.startswith("lora_B.")


def global_grad_norm(grads: list[Tensor]) -> Tensor:
    """The L2 norm of all gradients together (a 0-d tensor).

    The computation of ``torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)`` (per-tensor
    norms, then the norm of those) without its per-call grouping by device and dtype: the
    gradients of one engine share both.
    """
    norms: Sequence[Tensor]
    if len({(g.device, g.dtype) for g in grads}) == 1 and hasattr(torch, "_foreach_norm"):
        norms = torch._foreach_norm(grads, 2.0)
    else:
        norms = [torch.linalg.vector_norm(g, 2.0) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), 2.0)


def clip_grads_(grads: list[Tensor], max_norm: float, total_norm: Tensor) -> None:
    """Scale gradients in place by ``min(1, max_norm / (total_norm + 1e-6))`` (torch's rule)."""
    coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, coef.to(grads[0].device))


@dataclass(frozen=True)
class NamedMoments:
    """One parameter's AdamW state: the step count and both moments (param-shaped)."""

    step: int
    exp_avg: Tensor
    exp_avg_sq: Tensor


def _make_adamw(groups: list[dict[str, Any]]) -> torch.optim.AdamW:
    try:
        return torch.optim.AdamW(groups, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(groups, foreach=True)


class LoraAdamW:
    """AdamW over named trainable parameters, with per-step hyperparameters and LoRA+."""

    def __init__(self, named_params: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        named = [(n, p) for n, p in named_params if p.requires_grad]
        if not named:
            raise ValueError("LoraAdamW: no trainable parameters")
        self.params_a: list[torch.nn.Parameter] = [p for n, p in named if not is_lora_b(n)]
        self.params_b: list[torch.nn.Parameter] = [p for n, p in named if is_lora_b(n)]
        self.params: list[torch.nn.Parameter] = [p for _, p in named]
        self.names: list[str] = [n for n, _ in named]
        #: The hyperparameters of the last ``step`` call (``None`` before the first).
        self.last_params: AdamHyperparams | None = None
        groups = [
            {"params": self.params_a, "lr": 0.0, "name": "lora_A"},
            {"params": self.params_b, "lr": 0.0, "name": "lora_B"},
        ]
        self.optimizer = _make_adamw([g for g in groups if g["params"]])

    def has_grad(self) -> bool:
        """Whether any gradient has been accumulated since the last step."""
        return any(p.grad is not None for p in self.params)

    def grads(self) -> list[Tensor]:
        """The accumulated gradients (parameters without one are skipped)."""
        return [p.grad for p in self.params if p.grad is not None]

    def zero_grad(self) -> None:
        """Drop the accumulated gradients."""
        for p in self.params:
            p.grad = None

    def _set_hyperparameters(self, hp: AdamHyperparams) -> None:
        ratio = hp.lora_plus_lr_ratio if hp.lora_plus_lr_ratio is not None else 1.0
        for group in self.optimizer.param_groups:
            scale = ratio if group.get("name") == "lora_B" else 1.0
            group["lr"] = hp.learning_rate * scale
            group["betas"] = (hp.beta1, hp.beta2)
            group["eps"] = hp.eps
            group["weight_decay"] = hp.weight_decay

    @torch.no_grad()
    def step(self, hp: AdamHyperparams) -> dict[str, float]:
        """Clip, apply and zero the accumulated gradients; return the step's metrics
        (docs/semantics.md#2)."""
        hp.check()
        self.last_params = hp
        grads = self.grads()
        metrics = {"learning_rate": hp.learning_rate, "grad_norm": 0.0, "num_params_updated": 0.0}
        if not grads:  # nothing accumulated: complete, weights unchanged
            return metrics
        total_norm = global_grad_norm(grads)
        norm = float(total_norm)
        metrics["grad_norm"] = norm if math.isfinite(norm) else 0.0
        if hp.learning_rate == 0.0:  # docs/semantics.md#2: weights stay bit-identical
            self.zero_grad()
            return metrics
        if hp.grad_clip_norm is not None and hp.grad_clip_norm > 0:
            clip_grads_(grads, hp.grad_clip_norm, total_norm)
        self._set_hyperparameters(hp)
        groups = self.optimizer.param_groups  # re-read: load_state_dict replaces them
        if len(groups) > 1 and hp.lora_plus_lr_ratio in (None, 1.0):
            # Equal hyperparameters in every group (no LoRA+): one fused update over all
            # parameters instead of one per group. Adam is elementwise and its state is keyed
            # by parameter, so the result is bit for bit the same.
            one = {**groups[0], "params": [p for g in groups for p in g["params"]], "name": "all"}
            self.optimizer.param_groups = [one]
        try:
            self.optimizer.step()
        finally:
            self.optimizer.param_groups = groups
        metrics["num_params_updated"] = float(
            sum(p.numel() for p in self.params if p.grad is not None)
        )
        self.zero_grad()
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The wrapped ``torch.optim.AdamW`` state (moments and step counts)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` and drop accumulated gradients."""
        self.optimizer.load_state_dict(state)
        self.zero_grad()

    def named_state(self) -> dict[str, NamedMoments]:
        """A copy of every parameter's AdamW state, keyed by parameter name.

        Parameters that never took a step have no state and are left out.
        """
        out: dict[str, NamedMoments] = {}
        for name, p in zip(self.names, self.params, strict=True):
            state = self.optimizer.state.get(p)
            if not state:
                continue
            out[name] = NamedMoments(
                step=int(float(state["step"])),
                exp_avg=state["exp_avg"].detach().clone(),
                exp_avg_sq=state["exp_avg_sq"].detach().clone(),
            )
        return out

    def load_named_state(
        self, moments: Mapping[str, NamedMoments], last_params: AdamHyperparams | None
    ) -> None:
        """Replace the whole AdamW state with ``moments`` (see :meth:`named_state`).

        The caller has checked names and shapes. Goes through ``torch``'s own
        ``load_state_dict``, so the step counters get the dtype and device this optimizer
        (fused or not) uses. Drops accumulated gradients.
        """
        template = self.optimizer.state_dict()
        index = {
            id(p): i
            for i, p in enumerate(p for g in self.optimizer.param_groups for p in g["params"])
        }
        state: dict[int, dict[str, Tensor]] = {}
        for name, p in zip(self.names, self.params, strict=True):
            m = moments.get(name)
            if m is None:
                continue
            state[index[id(p)]] = {
                # float32, as torch creates it (exact for any count below 2**24)
                "step": torch.tensor(float(m.step), dtype=torch.float32),
                "exp_avg": m.exp_avg.to(device=p.device, dtype=p.dtype, copy=True),
                "exp_avg_sq": m.exp_avg_sq.to(device=p.device, dtype=p.dtype, copy=True),
            }
        self.optimizer.load_state_dict({"state": state, "param_groups": template["param_groups"]})
        if last_params is not None:  # informational: every step sets its own
            self._set_hyperparameters(last_params)
        self.last_params = last_params
        self.zero_grad()
