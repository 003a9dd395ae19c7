"""One optimizer param group stored back to back in one flat buffer (``numerics/optim.py``).

Each parameter's ``data`` is a view into the group's ``leaf``, so ``torch.optim.AdamW``
updates one tensor per group. Once a flat gradient buffer is bound, each parameter's
``grad`` can be made its view into that buffer, so autograd accumulates into the buffer in
place and the global norm and the update read it without gathering.
"""

from __future__ import annotations

import operator

import torch
from torch import Tensor

_GRAD = operator.attrgetter("grad")


class FlatGroup:
    """One param group's parameters stored back to back in one buffer: each parameter's
    ``data`` is a view into ``leaf``, the single tensor ``torch.optim.AdamW`` updates."""

    def __init__(self, name: str, named: list[tuple[str, torch.nn.Parameter]]) -> None:
        self.name = name
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])  # [N]
        self.leaf = torch.nn.Parameter(flat)
        self.slices: dict[str, slice] = {}
        start = 0
        for n, p in named:
            self.slices[n] = slice(start, start + p.numel())
            p.data = flat[self.slices[n]].view_as(p)
            start += p.numel()

        #: the flat gradient buffer (a slice of the optimizer's one buffer) and each
        #: parameter's view into it, bound once (:meth:`bind_grad_buffer`), installed
        #: before the first backward and kept, zeroed, by each step
        self.grad_buffer: Tensor | None = None
        self._views: list[Tensor] = []

    def bind_grad_buffer(self, buffer: Tensor) -> None:
        """Make ``buffer`` (``[N]``) this group's flat gradient and each parameter's view."""
        self.grad_buffer = buffer
        self._views = [
            buffer[self.slices[n]].view_as(p) for n, p in zip(self.names, self.params, strict=True)
        ]

    def install_grad_views(self) -> bool:
        """Before a backward with no gradient accumulated: give every parameter a zero
        gradient that is its view into the bound buffer, so autograd accumulates into it in
        place (it adds into an existing gradient) and it needs no gathering. True if it
        installed them (False: some parameter has a gradient already, or nothing is bound)."""
        fresh = self.grad_buffer is not None and all(p.grad is None for p in self.params)
        if fresh and self.grad_buffer is not None:
            self.grad_buffer.zero_()
            for p, view in zip(self.params, self._views, strict=True):
                p.grad = view
        return fresh

    def views_in_place(self) -> bool:
        """Whether every parameter's gradient is still its view into the bound buffer."""
        grads = map(_GRAD, self.params)
        return self.grad_buffer is not None and all(map(operator.is_, grads, self._views))

    def flat_grad(self) -> tuple[Tensor, int] | None:
        """``leaf.grad`` holding the parameters' gradients (zeros for a parameter without
        one) and how many elements had a gradient; None when none has one."""
        if self.views_in_place() and self.grad_buffer is not None:
            self.leaf.grad = self.grad_buffer
            return self.grad_buffer, self.leaf.numel()
        grads = [p.grad for p in self.params]
        if all(g is None for g in grads):
            return None
        full = [
            g if g is not None else torch.zeros_like(p)
            for g, p in zip(grads, self.params, strict=True)
        ]
        self.leaf.grad = torch.cat([g.reshape(-1) for g in full])  # [N]
        return self.leaf.grad, sum(g.numel() for g in grads if g is not None)

    def drop_grads(self) -> None:
        for p in self.params:
            p.grad = None
        self.leaf.grad = None
