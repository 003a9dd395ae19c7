"""Which plain model decodes one engine's samples (merged.py): the base, or a snapshot merged.

For the base weights the decoder is the plain base model, made once (it shares every tensor
with the live model). For a package snapshot it is a merged copy in the process-wide
``MERGED_CACHE``, kept under this engine's owner token: reused when cached, else merged in
place into a copy the cache hands back (``remerge_``) or newly made. ``None`` means decode
with the peft model over the shared base, the snapshot swapped in: half precision, no cache
key, or a merged copy larger than the whole budget.

A batch that mixes adapters (several packages, or packages and the base) decodes with
:meth:`Decoders.multi`: the plain base with every adapted layer a ``MultiLoraLinear``
(multi_lora.py), made once per engine; it shares every base tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from localsession.engine import head_logprobs, memory
from localsession.engine.merged import MERGED_CACHE, can_merge, merged_bytes, plain_model, remerge_
from localsession.engine.multi_lora import MultiLora, can_mix
from localsession.engine.snapshots import SnapshotKey, use_weights
from localsession.engine_options import EngineOptions


class Decoders:
    """One engine's decoding models. Every call is made under the engine's lock."""

    def __init__(
        self,
        model: Any,
        adapter: dict[str, torch.nn.Parameter],
        dtype: torch.dtype,
        device: torch.device,
        options: EngineOptions | None = None,
    ) -> None:
        options = options if options is not None else EngineOptions()
        #: the plain models' fused head (head_logprobs.mark), as the peft model's
        self._fused_head = options.fused_head
        MERGED_CACHE.set_budget(options.merged_cache_bytes)  # process-wide: merged.py
        #: the peft model and its live trainable parameters (snapshots swap into these)
        self._model, self._adapter, self._device = model, adapter, device
        self._can_merge = can_merge(model, dtype)
        self._merged_bytes = merged_bytes(model) if self._can_merge else 0
        self._plain_base: torch.nn.Module | None = None
        #: whether one batch may mix adapters (multi_lora.can_mix), and its model once made
        self.can_mix = can_mix(model)
        self._multi: MultiLora | None = None
        #: this engine's key in ``MERGED_CACHE``
        self.owner = object()

    def get(
        self, key: SnapshotKey | None, snapshot: dict[str, torch.Tensor] | None
    ) -> torch.nn.Module | None:
        """The plain model that decodes for ``snapshot`` (None: the base), or ``None`` to
        decode with the peft model (module doc)."""
        if snapshot is None:
            if self._plain_base is None:
                self._plain_base = plain_model(self._model, merge=False)
                head_logprobs.mark(self._plain_base, self._fused_head)
            return self._plain_base
        if not self._can_merge or key is None or self._merged_bytes > MERGED_CACHE.budget:
            return None
        owner = self.owner
        cached = MERGED_CACHE.get(owner, key)
        if cached is not None:
            return cached
        reused = MERGED_CACHE.make_room(owner, self._merged_bytes)
        with use_weights(self._model, self._adapter, snapshot):
            if reused is not None:
                remerge_(reused, self._model)
                merged = reused
            else:
                merged = plain_model(self._model, merge=True)
                head_logprobs.mark(merged, self._fused_head)
        MERGED_CACHE.put(owner, key, merged, self._merged_bytes)
        if self._device.type == "cpu":  # the merge's temporaries (deltas, stashed
            memory.trim()  # adapter) are garbage now: once per snapshot, not per step
        return merged

    def multi(self) -> MultiLora:
        """The multi-adapter decoding model (made the first time; ``can_mix`` must hold)."""
        if self._multi is None:
            self._multi = MultiLora(self._model, self._adapter, self._device)
        return self._multi

    def drop(self) -> None:
        """Forget the plain base and every merged copy this engine holds in the cache."""
        self._plain_base = None
        self._multi = None
        MERGED_CACHE.drop_owner(self.owner)
