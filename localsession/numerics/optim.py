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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from localsession import vocab
from localsession.numerics.flat_group import FlatGroup
from localsession.port import AdamHyperparams

__all__ = [
    "AdamHyperparams",
    "LoraAdamW",
    "NamedMoments",
    "clip_grads_",
    "global_grad_norm",
    "is_lora_b",
    "split_group_problem",
]

#: Values per row of the flat gradient buffer when its norm is taken (:meth:`LoraAdamW.grad_norm`):
#: a float32 sum's error grows with its length, so the buffer is normed row by row and the
#: row norms combined in float64. One ``torch.dot`` over the whole buffer was as fast, but
#: off by 1.4e-6 (relative) at 200k values and 7e-5 at 10M on an AVX-512 CPU; rows of 4096
#: stay within 2e-7 at every size up to 10M, and the buffer is padded with zeros to whole rows.
NORM_ROW = 4096


def is_lora_b(name: str) -> bool:
    """Whether a parameter name is a LoRA B matrix (peft naming: ``...lora_B.<adapter>...``)."""
    return ".lora_B." in name or name.startswith("lora_B.")


def split_group_problem(steps: Mapping[str, int], names: Iterable[str]) -> str | None:
    """Why optimizer state with these per-parameter step counts cannot be loaded over the
    parameters ``names``, or None. :class:`LoraAdamW` steps each group (the LoRA A
    matrices, the LoRA B matrices) as one tensor, so a group needs state for all of its
    parameters or for none, at one step count (as :meth:`LoraAdamW.named_state` writes it)."""
    names = list(names)
    for group, is_b in (("lora_A", False), ("lora_B", True)):
        members = [n for n in names if is_lora_b(n) == is_b]
        counts = sorted({steps[n] for n in members if n in steps})
        given = sum(n in steps for n in members)
        if given and (given != len(members) or len(counts) != 1):
            return (
                f"the optimizer state gives {given} of the {len(members)} {group} "
                f"parameters, at step counts {counts}: the optimizer steps a group's "
                "parameters together, so it needs all of them at one step count"
            )
    return None


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


def _buffer_norm(buffer: Tensor) -> Tensor:
    """The L2 norm of the flat gradient buffer (``[N]``, N a multiple of ``NORM_ROW``)."""
    rows = torch.linalg.vector_norm(buffer.view(-1, NORM_ROW), 2.0, dim=1)  # [N / NORM_ROW]
    return torch.linalg.vector_norm(rows, 2.0, dtype=torch.float64)


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
    """AdamW over named trainable parameters, with per-step hyperparameters and LoRA+.

    Each group's parameters live in one flat buffer (:class:`FlatGroup`), so the update is
    ``torch.optim.AdamW`` over one tensor per group instead of one per parameter: the same
    elementwise update, bit for bit, at a fraction of the per-tensor cost (fused AdamW on
    the tiny model's 28 adapter tensors: 634 µs; on the same values in 2 buffers: 303 µs).
    Before a backward, :meth:`install_grad_views` makes each parameter's gradient a view
    into its group's slice of one flat gradient buffer, so autograd accumulates into it in
    place and the global norm (the engine reports it after every ``forward_backward``, and
    ``step`` clips by it) is one op. A step zeroes the buffer and keeps the views; the
    buffer's version counter then tells whether a backward has added anything since.
    Gradients set any other way are gathered into the buffers at the step. A parameter
    without a gradient, in a group where another has one, steps with a zero gradient
    (``torch.optim.AdamW`` would skip it; a LoRA model's backward reaches every adapter
    parameter); a group where none has one is skipped.
    """

    def __init__(self, named_params: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        named = [(n, p) for n, p in named_params if p.requires_grad]
        if not named:
            raise ValueError("LoraAdamW: no trainable parameters")
        kinds = sorted({f"{p.device} {p.dtype}" for _, p in named})
        if len(kinds) != 1:  # they share one flat gradient buffer
            raise ValueError(f"LoraAdamW: the trainable parameters mix devices or dtypes: {kinds}")
        self.params: list[torch.nn.Parameter] = [p for _, p in named]
        self.names: list[str] = [n for n, _ in named]
        #: The hyperparameters of the last ``step`` call (``None`` before the first).
        self.last_params: AdamHyperparams | None = None
        split = {
            "lora_A": [(n, p) for n, p in named if not is_lora_b(n)],
            "lora_B": [(n, p) for n, p in named if is_lora_b(n)],
        }
        self._flat = [FlatGroup(name, part) for name, part in split.items() if part]
        self._group_of = {n: g for g in self._flat for n in g.names}
        groups = [{"params": [g.leaf], "lr": 0.0, "name": g.name} for g in self._flat]
        self.optimizer = _make_adamw(groups)
        #: every group's gradient back to back, made on the first backward: the norm a
        #: ``forward_backward`` reports is then one op
        self._grads: Tensor | None = None
        #: ``_grads._version`` when it was last zeroed with every view in place (None: not
        #: since a gradient was set another way). A backward adds into the views in place,
        #: which bumps the version, so an equal version means nothing has accumulated.
        self._clean_version: int | None = None

    def _views_in_place(self) -> bool:
        return self._grads is not None and all(g.views_in_place() for g in self._flat)

    def _clean(self) -> bool:
        """Whether the views hold nothing accumulated since they were zeroed."""
        views = self._views_in_place()
        return views and self._grads is not None and self._grads._version == self._clean_version

    def has_grad(self) -> bool:
        """Whether any gradient has been accumulated since the last step."""
        if self._views_in_place():
            return not self._clean()
        return any(p.grad is not None for p in self.params)

    def zero_grad(self) -> None:
        """Drop the accumulated gradients. While every gradient is its view of the flat
        buffer the buffer is zeroed and the views stay, so the next backward needs no
        install (28 gradient setters on the tiny model); otherwise they are dropped."""
        if self._grads is not None and self._views_in_place():
            self._grads.zero_()
            self._clean_version = self._grads._version
            for group in self._flat:
                group.leaf.grad = None
            return
        for group in self._flat:
            group.drop_grads()

    def install_grad_views(self) -> None:
        """Call before a backward: where nothing has accumulated, gradients then accumulate
        in place into each group's flat buffer (:meth:`FlatGroup.install_grad_views`),
        each a slice of one buffer for all groups."""
        if self._grads is None:
            first = self._flat[0].leaf
            total = sum(g.leaf.numel() for g in self._flat)
            padded = -(-total // NORM_ROW) * NORM_ROW  # the tail stays zero: see _buffer_norm
            self._grads = torch.zeros(padded, dtype=first.dtype, device=first.device)  # [N]
            start = 0
            for group in self._flat:
                group.bind_grad_buffer(self._grads[start : start + group.leaf.numel()])
                start += group.leaf.numel()
        installed = [group.install_grad_views() for group in self._flat]
        if all(installed):
            self._clean_version = self._grads._version
        elif any(installed):  # next to gradients set another way: count them as accumulated
            self._clean_version = None

    @contextmanager
    def restored_on_error(self) -> Iterator[None]:
        """If the block raises, put every gradient back as it was before it (in place: they
        may be views of the flat buffer), and whether any had accumulated."""
        was_clean = self._clean()  # then nothing needs copying: zero_grad puts it back
        before = (
            [] if was_clean else [None if p.grad is None else p.grad.clone() for p in self.params]
        )
        try:
            yield
        except BaseException:
            if was_clean:
                self.zero_grad()
                raise
            with torch.no_grad():
                for p, grad in zip(self.params, before, strict=True):
                    if grad is None or p.grad is None:
                        p.grad = grad
                    else:
                        p.grad.copy_(grad)
            raise

    def _gathered(self) -> list[tuple[Tensor, int]]:
        """Each group's flat gradient and its count of elements with a gradient (groups
        without any gradient left out; none when the views hold nothing accumulated)."""
        if self._clean():
            return []
        return [f for f in (g.flat_grad() for g in self._flat) if f is not None]

    def _total_norm(self, flat: list[Tensor]) -> Tensor:
        """The global L2 norm of the groups' flat gradients ``flat`` (from :meth:`_gathered`):
        two ops over the shared buffer when every group's gradient is its slice of it."""
        buffer = self._grads
        if (
            buffer is not None
            and len(flat) == len(self._flat)
            and all(f is g.grad_buffer for f, g in zip(flat, self._flat, strict=True))
        ):
            return _buffer_norm(buffer)
        return global_grad_norm(flat)

    def grad_norm(self) -> float:
        """The global L2 norm of the accumulated gradients (0.0 with none)."""
        buffer = self._grads
        if buffer is not None and self._views_in_place():  # all in the buffer (zeros if none)
            return float(_buffer_norm(buffer))
        flat = [grad for grad, _ in self._gathered()]
        return float(self._total_norm(flat)) if flat else 0.0

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
        metrics: dict[str, float] = {
            vocab.Metric.LEARNING_RATE: hp.learning_rate,
            vocab.Metric.GRAD_NORM: 0.0,
            vocab.Metric.NUM_PARAMS_UPDATED: 0.0,
        }
        gathered = self._gathered()
        if not gathered:  # nothing accumulated: complete, weights unchanged
            return metrics
        flat_grads = [grad for grad, _ in gathered]
        updated = sum(count for _, count in gathered)
        total_norm = self._total_norm(flat_grads)
        norm = float(total_norm)
        metrics[vocab.Metric.GRAD_NORM] = norm if math.isfinite(norm) else 0.0
        if hp.learning_rate == 0.0:  # docs/semantics.md#2: weights stay bit-identical
            self.zero_grad()
            return metrics
        if hp.grad_clip_norm is not None and hp.grad_clip_norm > 0:
            clip_grads_(flat_grads, hp.grad_clip_norm, total_norm)
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
        metrics[vocab.Metric.NUM_PARAMS_UPDATED] = float(updated)
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
            group = self._group_of[name]
            state = self.optimizer.state.get(group.leaf)
            if not state:
                continue
            part = group.slices[name]
            out[name] = NamedMoments(
                step=int(float(state["step"])),
                exp_avg=state["exp_avg"][part].view_as(p).clone(),
                exp_avg_sq=state["exp_avg_sq"][part].view_as(p).clone(),
            )
        return out

    def load_named_state(
        self, moments: Mapping[str, NamedMoments], last_params: AdamHyperparams | None
    ) -> None:
        """Replace the whole AdamW state with ``moments`` (see :meth:`named_state`).

        The caller has checked names and shapes (``checkpoint.read_optimizer``); state that
        splits a group (:func:`split_group_problem`) raises ``ValueError`` before anything
        changes. Goes through ``torch``'s own ``load_state_dict``, so the step counters get the
        dtype and device this optimizer (fused or not) uses. Drops accumulated gradients.
        """
        problem = split_group_problem({n: m.step for n, m in moments.items()}, self.names)
        if problem is not None:
            raise ValueError(problem)
        template = self.optimizer.state_dict()
        state: dict[int, dict[str, Tensor]] = {}
        for index, group in enumerate(self._flat):  # one leaf per param group, in order
            if group.names[0] not in moments:
                continue
            leaf = group.leaf

            def flat(key: str, names: list[str] = group.names, like: Tensor = leaf) -> Tensor:
                parts = [getattr(moments[n], key).reshape(-1) for n in names]
                return torch.cat(parts).to(device=like.device, dtype=like.dtype)

            state[index] = {
                # float32, as torch creates it (exact for any count below 2**24)
                "step": torch.tensor(float(moments[group.names[0]].step), dtype=torch.float32),
                "exp_avg": flat("exp_avg"),
                "exp_avg_sq": flat("exp_avg_sq"),
            }
        self.optimizer.load_state_dict({"state": state, "param_groups": template["param_groups"]})
        if last_params is not None:  # informational: every step sets its own
            self._set_hyperparameters(last_params)
        self.last_params = last_params
        self.zero_grad()
