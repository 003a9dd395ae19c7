"""One base, many adapters: sessions on the same base model share one copy of its weights.

A process-wide :data:`POOL` holds each loaded base model once, keyed by what makes the
weights identical: the resolved model (kind and target), the device, the dtype and the
placement (``placement.py``). A session gets a *view* of the base: a copy of the module tree
in which every parameter and buffer is the pool's own tensor (same storage), so the view
costs the size of the Python module objects, not of the weights. peft then wraps the view
with the session's LoRA adapter; the adapter, its gradients and its optimizer state belong to
that session alone.

Why this cannot make sessions interfere: the shared tensors are frozen
(``requires_grad=False``) and nothing writes them in place (merging for decoding builds new
tensors, ``merged.py``); every session computes with its own modules, adapter and lock. So a
session's results are bit-for-bit those of a session with a private copy of the base.

The pool counts references: the last session on a base to close frees it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from localsession.port import ResolvedModel

PoolKey = tuple[str, str, str, str, str]


@dataclass
class SharedBase:
    """A loaded, frozen base model and its tokenizer, shared by every session on it."""

    key: PoolKey
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    refs: int = 0
    #: guards ``refs``; set by the pool
    _mutex: threading.Lock = field(default_factory=threading.Lock, repr=False)


def pool_key(
    resolved: ResolvedModel, device: torch.device, dtype: torch.dtype, placement: str = ""
) -> PoolKey:
    """What makes two sessions' base weights the same tensors."""
    target = resolved.target
    if resolved.kind != "builtin":
        target = str(Path(target).resolve())
    return (resolved.kind, target, str(device), str(dtype), placement)


class BasePool:
    """Loaded base models by :func:`pool_key`, reference-counted."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._entries: dict[PoolKey, SharedBase] = {}

    def acquire(
        self, key: PoolKey, load: Callable[[], tuple[Any, Any, torch.device, torch.dtype]]
    ) -> SharedBase:
        """The shared base for ``key``, loading it with ``load()`` the first time.

        ``load`` returns (model on its device, tokenizer, device, dtype); the model is
        frozen here. Loading happens under the pool lock, so two sessions opening at once
        still load one copy.
        """
        with self._mutex:
            entry = self._entries.get(key)
            if entry is None:
                model, tokenizer, device, dtype = load()
                model.requires_grad_(False)
                model.eval()
                entry = SharedBase(key, model, tokenizer, device, dtype)
                self._entries[key] = entry
            entry.refs += 1
            return entry

    def release(self, entry: SharedBase) -> None:
        """Drop one reference; the last one removes the base from the pool."""
        with self._mutex:
            entry.refs -= 1
            if entry.refs <= 0 and self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    def __len__(self) -> int:
        with self._mutex:
            return len(self._entries)

    def entries(self) -> list[SharedBase]:
        """The bases loaded now (tests, diagnostics)."""
        with self._mutex:
            return list(self._entries.values())


#: The process-wide pool every ``TorchEngine`` draws from.
POOL = BasePool()


def session_view(base: torch.nn.Module) -> Any:
    """A copy of ``base``'s module tree whose parameters and buffers *are* ``base``'s
    tensors (same objects, same storage). peft may replace its modules freely; the shared
    tensors are never copied. Hooks (accelerate placement) are copied with their modules."""
    memo: dict[int, Any] = {id(t): t for t in base.parameters()}
    memo.update({id(t): t for t in base.buffers()})
    for module in base.modules():  # accelerate's hooks hold the offloaded weights' map
        hook = getattr(module, "_hf_hook", None)
        if hook is not None:
            memo[id(hook)] = hook
    return copy.deepcopy(base, memo)


def load_shared(
    spec: Any, resolved: ResolvedModel | None = None, *, pool: BasePool | None = None
) -> tuple[Any, SharedBase]:
    """(``LoadedModel`` with this session's seeded LoRA on a view of the shared base, the
    pool entry to release on close). The one model-load path: ``pool`` is the process-wide
    :data:`POOL` unless given (:func:`load_private` gives a pool of its own)."""
    pool = POOL if pool is None else pool
    from localsession.engine import loading, placement
    from localsession.engine.precision import pick_dtype

    resolved = loading.local_model(resolved if resolved is not None else loading.spec_model(spec))
    options = spec.options
    device, default_dtype = loading.pick_device(options.device)
    dtype = pick_dtype(device, default_dtype, options.dtype)
    plan = placement.plan(resolved, options)

    def load() -> tuple[Any, Any, torch.device, torch.dtype]:
        if plan is not None:
            model, tokenizer = placement.load_placed(resolved, dtype, plan)
            return model, tokenizer, plan.execution_device, dtype
        model, tokenizer = loading.load_base(resolved, dtype)
        return model.to(device=device), tokenizer, device, dtype

    entry = pool.acquire(pool_key(resolved, device, dtype, plan.key if plan else ""), load)
    try:
        view = session_view(entry.model)
        peft_model = loading.apply_lora(
            view,
            spec.rank,
            spec.alpha,
            spec.seed,
            unembed=bool(spec.train_unembed),
            options=options,
        )
        if plan is not None:
            placement.materialise_lora(peft_model, plan.execution_device, spec.seed)
        # The tokenizer is shared too, but its name is the session's model id (a mapped name
        # and its target share weights, not names): a shallow copy carries it.
        tokenizer = copy.copy(entry.tokenizer)
        tokenizer.name_or_path = resolved.name
        loaded = loading.loaded_model(
            peft_model, entry.model, tokenizer, entry.device, entry.dtype, resolved, options
        )
    except BaseException:
        pool.release(entry)
        raise
    return loaded, entry


def load_private(spec: Any, resolved: ResolvedModel | None = None) -> Any:
    """A ``LoadedModel`` on a private copy of its base: the same path as
    :func:`load_shared`, through a pool of its own (tests compare the two)."""
    loaded, _entry = load_shared(spec, resolved, pool=BasePool())
    return loaded
