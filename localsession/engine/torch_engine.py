"""``TorchEngine``: the real engine behind a session (the ``Engine`` protocol in torch).

One instance holds one session's trainable LoRA adapter, the AdamW state and the accumulated
gradients, on a view of a base model that every session on the same base shares
(``base_pool``: one copy of the weights per resolved model, device, dtype and placement).
All compute runs under the session's lock, so a sampling batch never sees a half-applied
update (engine_api threading contract).

- ``forward_backward`` / ``forward`` share one code path (``forward`` runs it under
  ``torch.no_grad``), so their logprobs agree bit for bit. Datums are right-padded into one
  batch; the loss is the plain sum over real tokens (docs/semantics.md#1).
- Inputs are validated before any tensor reaches the model; an ``EngineInputError`` leaves
  no gradient behind.
- ``sample`` / ``compute_logprobs`` with ``weights=None`` read the *base* model (adapter
  disabled); with a package directory they read that package's adapter snapshot, never the
  live training weights (docs/semantics.md#3). Snapshots are loaded lazily and cached (LRU);
  decoding runs on a plain copy of the model (``merged``): the base layers themselves for
  the base, the snapshot merged into the weights in float32, held in the process-wide
  ``MERGED_CACHE`` under its memory budget (a copy evicted from it is re-merged in place for
  the next snapshot; a copy larger than the budget is never made, and that snapshot decodes
  through the peft model over the shared base instead). Prompt logprobs swap the snapshot
  into the peft adapter under the lock and restore the live tensors bit for bit afterwards,
  so they match ``forward``. A request's ``on_token`` hears each token as it is decoded.
- ``save_package`` / ``load_package`` (docs/semantics.md#5, file formats in ``checkpoint``):
  tensors are copied under the lock and written outside it; a load reads and checks every
  file before anything live changes, then copies into the existing parameters so the
  optimizer's references stay valid.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch

from localsession.engine import memory
from localsession.engine.base_pool import POOL, SharedBase, load_shared
from localsession.engine.checkpoint import (
    ADAPTER_NAME,
    ADAPTER_WEIGHTS,
    adapter_config_dict,
    adapter_layout,
    file_key,
    merged_state_dict,
    read_adapter,
    read_optimizer,
    read_sampling_adapter,
    write_adapter,
    write_merged,
    write_optimizer,
)
from localsession.engine.flops import count_params, model_flops, peak_flops, throughput_metrics
from localsession.engine.merged import (
    MERGED_CACHE,
    adapted_layers,
    can_merge,
    merged_bytes,
    plain_model,
    remerge_,
)
from localsession.engine.model import LoadedModel
from localsession.engine.sampling import BatchSampler, prompt_logprobs
from localsession.numerics.datums import (
    Batch,
    check_vocab,
    finite_or_raise,
    fwd_result,
    int_tensor,
    parse_datums,
)
from localsession.numerics.losses import (
    ClipConfig,
    check_loss_fn,
    compute_loss,
    datum_metrics,
    parse_loss_config,
    token_logprobs,
)
from localsession.numerics.optim import AdamParams, LoraAdamW, global_grad_norm
from localsession.runtime.engine_api import EngineInputError, EngineSpec, SampleRequest

#: Padded tokens per training micro-batch on a CPU (``TorchEngine._chunked_backward``).
CHUNK_TOKENS = 4096
#: Float32 logits per training micro-batch on a CPU: a large vocabulary's logits (and the
#: activations that come with as many tokens) set the step's peak memory (measured on
#: SmolLM2-135M, 8×256 tokens: 6.6 GB peak RSS in one batch).
CHUNK_LOGIT_BYTES = 128 * 2**20
#: How many package snapshots ``sample`` keeps loaded (CPU memory, per engine).
SNAPSHOT_CACHE_SIZE = 8


class ForeignSnapshot(dict[str, torch.Tensor]):
    """A package adapter of another rank or alpha than the session's (``sample`` reads any):
    its own tensors (on the model's device and dtype) and its own LoRA ``scaling``."""

    scaling: float


class TorchEngine:
    """One session's LoRA model on a local device (CPU float32 or CUDA bfloat16)."""

    def __init__(self, spec: EngineSpec, loaded: LoadedModel | None = None) -> None:
        self.spec = spec
        #: the shared base this session's adapter sits on (base_pool.py); None when the
        #: caller handed in its own ``loaded`` model
        self._shared: SharedBase | None = None
        if loaded is None:
            loaded, self._shared = load_shared(spec)
        self._loaded = loaded
        self._mutex = threading.Lock()
        self._optimizer = LoraAdamW(self._loaded.model.named_parameters())
        self._sampler = BatchSampler(
            self._loaded.model,
            self._loaded.tokenizer,
            self._loaded.eos_ids,
            self._loaded.pad_id,
            self._loaded.device,
        )
        self._layout = adapter_layout(self._loaded.model)
        #: live parameter name -> the trainable (LoRA) parameter, in model order
        self._adapter: dict[str, torch.nn.Parameter] = {
            name: p for name, p in self._loaded.model.named_parameters() if p.requires_grad
        }
        #: (path, inode, mtime_ns, size) of a package's adapter file -> name -> tensor (CPU)
        self._snapshots: OrderedDict[tuple[str, int, int, int], dict[str, torch.Tensor]] = (
            OrderedDict()
        )
        self._snapshot_lock = threading.Lock()
        #: Decoding models (merged.py): the plain base model (shares every tensor), and
        #: merged snapshot copies in the process-wide ``MERGED_CACHE`` under this owner.
        self._can_merge = can_merge(self._loaded.model, self._loaded.dtype)
        #: The most positions the model takes (``max_position_embeddings``; None: unknown).
        self.max_positions: int | None = (
            int(getattr(self._loaded.model.config, "max_position_embeddings", 0) or 0) or None
        )
        #: (non-embedding parameters, layers, width) for the FLOP count (flops.py)
        self._shape = count_params(self._loaded.model)
        self._merged_bytes = merged_bytes(self._loaded.model) if self._can_merge else 0
        self._plain_base: torch.nn.Module | None = None
        self._cache_owner = object()
        #: rough bytes of activations (or KV cache) per token, for ``memory.trim_after``
        config = getattr(self._loaded.model.get_base_model(), "config", None)
        layers = int(getattr(config, "num_hidden_layers", 1) or 1)
        hidden = int(getattr(config, "hidden_size", 64) or 64)
        self._token_bytes = 2 * layers * hidden * 4
        self._closed = False

    # -- introspection (tests, checkpoints) ---------------------------------------------

    @property
    def model(self) -> Any:
        """The peft-wrapped model (trainable adapter on a frozen base)."""
        return self._loaded.model

    @property
    def device(self) -> torch.device:
        """The device the model runs on."""
        return self._loaded.device

    @property
    def vocab_size(self) -> int:
        """Rows of the input embedding (the range token ids must lie in)."""
        return self._loaded.vocab_size

    @property
    def optimizer(self) -> LoraAdamW:
        """The AdamW wrapper holding moments and accumulated gradients."""
        return self._optimizer

    @property
    def lock(self) -> threading.Lock:
        """The compute lock (hold it to read weights consistently from another thread)."""
        return self._mutex

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """A CPU copy of every trainable (LoRA) tensor, keyed by parameter name."""
        with self._mutex:
            return {
                name: p.detach().to("cpu", copy=True)
                for name, p in self._loaded.model.named_parameters()
                if p.requires_grad
            }

    # -- training -----------------------------------------------------------------------

    def forward_backward(
        self,
        datums: list[dict[str, Any]],
        loss_fn: str,
        loss_fn_config: dict[str, Any] | None,
        *,
        backward: bool,
    ) -> dict[str, Any]:
        """Run the loss (docs/semantics.md#1) over wire datums; accumulate gradients when
        ``backward``."""
        self._check_open()
        check_loss_fn(loss_fn)
        clip = parse_loss_config(loss_fn, loss_fn_config)
        if not datums:
            return {"metrics": {"loss": 0.0, "global_token_num": 0.0}, "lossFnOutputs": []}
        batch = parse_datums(
            datums, loss_fn, self._loaded.vocab_size, self._loaded.pad_id, self._loaded.device,
            max_length=self.max_positions,
        )
        grad_mode: AbstractContextManager[Any] = (
            torch.enable_grad() if backward else torch.no_grad()
        )
        try:
            with self._mutex, grad_mode:
                start = time.perf_counter()
                result = self._loss_step(batch, loss_fn, clip, backward)
                seconds = time.perf_counter() - start  # .tolist() in fwd_result synchronised
        finally:
            self._trim(int(batch.tokens_BT.numel()) * (self._token_bytes + 4 * self.vocab_size))
        params, layers, width = self._shape
        flops = model_flops(params, layers, width, batch.lengths, backward=backward)
        peak = peak_flops(self._loaded.device, self._loaded.dtype)
        result["metrics"].update(throughput_metrics(flops, seconds, peak))
        return result

    def forward(
        self, datums: list[dict[str, Any]], loss_fn: str, loss_fn_config: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``forward_backward(..., backward=False)``."""
        return self.forward_backward(datums, loss_fn, loss_fn_config, backward=False)

    def _loss_step(
        self, batch: Batch, loss_fn: str, clip: ClipConfig, backward: bool
    ) -> dict[str, Any]:
        if backward and self._chunk_rows(batch) < len(batch.lengths):
            lp_BT, loss_BT, metrics = self._chunked_backward(batch, loss_fn, clip)
        else:
            out = self._loaded.model(input_ids=batch.tokens_BT, use_cache=False)
            lp_BT = token_logprobs(out["logits"], batch.targets_BT, batch.temperature_BT)
            del out
            loss_BT, metrics = compute_loss(loss_fn, lp_BT, batch.loss_inputs(), clip)
            total = loss_BT.sum()
            finite_or_raise(float(total.detach()), "the loss")  # before any gradient is added
            if backward:
                total.backward()
        values = datum_metrics(loss_fn, lp_BT, loss_BT, batch.loss_inputs(), clip)
        # the norm of the gradient accumulated so far (this pass's included): the SDK keeps
        # the last chunk's, which is then the whole batch's
        grads = [p.grad for p in self._adapter.values() if p.grad is not None]
        norm = float(global_grad_norm(grads)) if grads else 0.0
        metrics["actor/grad_norm"] = norm
        values["actor/grad_norm"] = [norm] * len(batch.lengths)
        return fwd_result(batch, lp_BT, loss_BT, metrics, values)

    def _chunk_rows(self, batch: Batch) -> int:
        """Rows per micro-batch: all of them, except on a CPU when the padded batch holds
        more than ``CHUNK_TOKENS`` tokens or more than ``CHUNK_LOGIT_BYTES`` of float32
        logits (see ``_chunked_backward``)."""
        rows, width = (int(n) for n in batch.tokens_BT.shape)
        if self._loaded.device.type != "cpu":
            return rows
        by_tokens = CHUNK_TOKENS // width
        by_logits = CHUNK_LOGIT_BYTES // (width * self.vocab_size * 4)
        return min(rows, max(1, min(by_tokens, by_logits)))

    def _chunked_backward(
        self, batch: Batch, loss_fn: str, clip: ClipConfig
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Forward + backward one micro-batch of rows at a time, accumulating gradients.

        On a CPU a batch past ~4k tokens outgrows the caches and runs slower per token
        (measured: 128×128 tokens at 0.6× the tokens/s of 32×128, raw torch too), and a
        large vocabulary's logits and activations set the peak memory; the summed loss
        makes micro-batching exact up to float rounding. Metrics are computed
        once over the whole batch's logprobs, as unchunked. A non-finite chunk puts the
        gradients back as they were before this call, then raises.
        """
        params = list(self._adapter.values())
        before = [None if p.grad is None else p.grad.clone() for p in params]
        step = self._chunk_rows(batch)
        width = batch.tokens_BT.shape[1]
        lp_parts: list[torch.Tensor] = []
        loss_parts: list[torch.Tensor] = []
        try:
            for start in range(0, len(batch.lengths), step):
                sub = batch.rows(start, start + step)
                logits_BTV = self._loaded.model(input_ids=sub.tokens_BT, use_cache=False)["logits"]
                lp_BT = token_logprobs(logits_BTV, sub.targets_BT, sub.temperature_BT)
                del logits_BTV
                loss_BT, _ = compute_loss(loss_fn, lp_BT, sub.loss_inputs(), clip)
                total = loss_BT.sum()
                finite_or_raise(float(total.detach()), "the loss")
                total.backward()
                pad = (0, width - lp_BT.shape[1])  # back to the batch's width
                lp_parts.append(torch.nn.functional.pad(lp_BT.detach(), pad))
                loss_parts.append(torch.nn.functional.pad(loss_BT.detach(), pad))
        except BaseException:
            for p, grad in zip(params, before, strict=True):
                p.grad = grad
            raise
        lp_all = torch.cat(lp_parts)
        _, metrics = compute_loss(loss_fn, lp_all, batch.loss_inputs(), clip)
        return lp_all, torch.cat(loss_parts), metrics

    def optim_step(self, adam_params: dict[str, Any]) -> dict[str, float]:
        """Apply and zero the accumulated gradients with AdamW (docs/semantics.md#2)."""
        self._check_open()
        hp = AdamParams.from_wire(adam_params)
        with self._mutex:
            return self._optimizer.step(hp)

    def zero_grad(self) -> None:
        """Drop accumulated gradients (``load_state`` does this)."""
        with self._mutex:
            self._optimizer.zero_grad()

    # -- sampling -----------------------------------------------------------------------

    def _snapshot(
        self, weights: str | None
    ) -> tuple[tuple[str, int, int, int] | None, dict[str, torch.Tensor] | None]:
        """(file key, adapter tensors) of package ``weights`` (cached); ``(None, None)``
        for the base."""
        if weights is None:
            return None, None
        path = Path(weights)
        key: tuple[str, int, int, int] | None
        try:
            stat = (path / ADAPTER_WEIGHTS).stat()
            key = (str(path.resolve()), stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except (OSError, ValueError):
            key = None  # read_adapter below raises the package error
        with self._snapshot_lock:
            if key is not None and key in self._snapshots:
                self._snapshots.move_to_end(key)
                return key, self._snapshots[key]
        tensors, scaling = read_sampling_adapter(path, self._layout)
        snapshot: dict[str, torch.Tensor]
        if scaling is None:
            snapshot = {
                name: tensors[k].to(dtype=self._adapter[name].dtype)
                for k, name in self._layout.names.items()
            }
        else:  # swapped in whole by _use_weights: on the parameter's device already
            snapshot = ForeignSnapshot(
                (name, tensors[k].to(self._adapter[name].device, self._adapter[name].dtype))
                for k, name in self._layout.names.items()
            )
            snapshot.scaling = scaling
        if key is not None:
            with self._snapshot_lock:
                self._snapshots[key] = snapshot
                while len(self._snapshots) > SNAPSHOT_CACHE_SIZE:
                    self._snapshots.popitem(last=False)
        return key, snapshot

    @contextmanager
    def _use_weights(self, snapshot: dict[str, torch.Tensor] | None) -> Iterator[None]:
        """Run with the base model (``None``) or with ``snapshot`` in the adapter.

        The caller holds the lock. The live adapter tensors are stashed and copied back
        bit for bit however the body ends. (peft's ``set_adapter`` is avoided: it flips
        ``requires_grad``.)
        """
        if snapshot is None:
            with self._loaded.model.disable_adapter():
                yield
            return
        if isinstance(snapshot, ForeignSnapshot):
            with self._foreign_weights(snapshot):
                yield
            return
        with torch.no_grad():
            live = {name: p.detach().clone() for name, p in self._adapter.items()}
            try:
                for name, p in self._adapter.items():
                    p.copy_(snapshot[name])
                yield
            finally:
                for name, p in self._adapter.items():
                    p.copy_(live[name])

    @contextmanager
    def _foreign_weights(self, snapshot: ForeignSnapshot) -> Iterator[None]:
        """Run with a package of another rank/alpha in the adapter: each LoRA parameter's
        storage is swapped for the package's tensor (shapes may differ) and every LoRA layer
        takes its scale; the live storage and scales come back however the body ends."""
        layers = adapted_layers(self._loaded.model)
        live = {name: p.data for name, p in self._adapter.items()}
        scales = {name: layer.scaling[ADAPTER_NAME] for name, layer in layers.items()}
        try:
            for name, p in self._adapter.items():
                p.data = snapshot[name]
            for layer in layers.values():
                layer.scaling[ADAPTER_NAME] = snapshot.scaling
            yield
        finally:
            for name, p in self._adapter.items():
                p.data = live[name]
            for name, layer in layers.items():
                layer.scaling[ADAPTER_NAME] = scales[name]

    def _check_prompt(self, tokens: Sequence[Any], what: str) -> list[int]:
        if not isinstance(tokens, (list, tuple)) or not tokens:
            raise EngineInputError(f"{what} must be a non-empty list of token ids")
        ids = int_tensor(list(tokens), what)
        check_vocab(ids, self._loaded.vocab_size, what)
        return [int(t) for t in ids.tolist()]

    def _check_request(self, index: int, req: SampleRequest) -> SampleRequest:
        what = f"request {index}"
        prompt = self._check_prompt(req.prompt, f"{what}: `prompt`")
        problems = []
        if req.num_samples < 1:
            problems.append(f"`num_samples` must be >= 1, got {req.num_samples}")
        if req.max_tokens < 0:
            problems.append(f"`max_tokens` must be >= 0, got {req.max_tokens}")
        if not req.temperature >= 0:
            problems.append(f"`temperature` must be >= 0, got {req.temperature}")
        if not 0 < req.top_p <= 1:
            problems.append(f"`top_p` must be in (0, 1], got {req.top_p}")
        limit = self.max_positions
        if limit is not None and len(prompt) + max(req.max_tokens, 0) > limit:
            problems.append(
                f"the prompt's {len(prompt)} tokens plus max_tokens={req.max_tokens} make "
                f"{len(prompt) + req.max_tokens} positions, past the model's maximum context "
                f"length of {limit}; shorten the prompt or lower max_tokens"
            )
        if problems:
            raise EngineInputError(f"{what}: " + "; ".join(problems))
        return req if prompt == req.prompt else dataclasses.replace(req, prompt=prompt)

    def sample(
        self, weights: str | None, requests: list[SampleRequest]
    ) -> list[dict[str, Any]]:
        """Run several sample requests as one batch (docs/semantics.md#3)."""
        self._check_open()
        checked = [self._check_request(i, r) for i, r in enumerate(requests)]
        if not checked:
            return []
        key, snapshot = self._snapshot(weights)
        with self._mutex, torch.no_grad():
            decoder = self._decoder(key, snapshot)
            if decoder is not None:
                grouped = self._sampler.run(checked, decoder)
            else:
                with self._use_weights(snapshot):
                    grouped = self._sampler.run(checked)
            responses: list[dict[str, Any]] = [
                {
                    "sequences": [
                        {"stopReason": s.stop_reason, "tokens": s.tokens, "logprobs": s.logprobs}
                        for s in streams
                    ]
                }
                for streams in grouped
            ]
            wanted = [
                (req, response)
                for req, response in zip(checked, responses, strict=True)
                if req.include_prompt_logprobs or (req.topk_prompt_logprobs or 0) > 0
            ]
            if wanted:  # on the peft model: bit-identical to ``forward`` (prompt_logprobs)
                with self._use_weights(snapshot):
                    for req, response in wanted:
                        topk = req.topk_prompt_logprobs or 0
                        values, top = prompt_logprobs(
                            self._loaded.model, req.prompt, self._loaded.device, topk
                        )
                        if req.include_prompt_logprobs:
                            response["promptLogprobs"] = values
                        if topk > 0:
                            response["topkPromptLogprobs"] = top
        streams = sum(r.num_samples * (len(r.prompt) + r.max_tokens) for r in checked)
        self._trim(streams * self._token_bytes)
        return responses

    def _decoder(
        self, key: tuple[str, int, int, int] | None, snapshot: dict[str, torch.Tensor] | None
    ) -> torch.nn.Module | None:
        """The plain model that decodes for ``snapshot`` (merged.py), or ``None`` to decode
        with the peft model over the shared base (half precision, no cache key, or a merged
        copy larger than the cache budget). Caller holds the lock."""
        if snapshot is None:
            if self._plain_base is None:
                self._plain_base = plain_model(self._loaded.model, merge=False)
            return self._plain_base
        if not self._can_merge or key is None or self._merged_bytes > MERGED_CACHE.budget:
            return None
        owner = self._cache_owner
        cached = MERGED_CACHE.get(owner, key)
        if cached is not None:
            return cached
        reused = MERGED_CACHE.make_room(owner, self._merged_bytes)
        with self._use_weights(snapshot):
            if reused is not None:
                remerge_(reused, self._loaded.model)
                merged = reused
            else:
                merged = plain_model(self._loaded.model, merge=True)
        MERGED_CACHE.put(owner, key, merged, self._merged_bytes)
        self._trim(self._merged_bytes)  # the merge's temporaries (deltas, stashed adapter)
        return merged

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        """Per-token log p(tokens[i] | tokens[:i]) at T = 1; entry 0 is ``None``."""
        self._check_open()
        ids = self._check_prompt(tokens, "`prompt`")
        if self.max_positions is not None and len(ids) > self.max_positions:
            raise EngineInputError(
                f"`prompt` has {len(ids)} tokens, past the model's maximum context length of "
                f"{self.max_positions}; shorten it"
            )
        _, snapshot = self._snapshot(weights)
        with self._mutex, self._use_weights(snapshot), torch.no_grad():
            values, _ = prompt_logprobs(self._loaded.model, ids, self._loaded.device, 0)
        self._trim(len(ids) * (self._token_bytes + 4 * self.vocab_size))
        return [None, *values[1:]]

    # -- packages -----------------------------------------------------------------------

    def save_package(
        self, directory: str, *, include_optimizer: bool, merge_weights: bool
    ) -> None:
        """Write the adapter (+ optimizer state, + merged model) into ``directory``."""
        self._check_open()
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        with self._mutex:
            adapter = {
                file_key(name): p.detach().to("cpu", copy=True)
                for name, p in self._adapter.items()
            }
            moments = self._optimizer.named_state() if include_optimizer else {}
            last_params = self._optimizer.last_params
            merged = merged_state_dict(self._loaded.model) if merge_weights else None
        resolved = self._loaded.resolved
        # a local directory or nothing: never a hub id that a loader might try to fetch
        base_path = None if resolved.kind == "builtin" else resolved.target
        write_adapter(target, adapter, adapter_config_dict(self._loaded.model, base_path))
        if include_optimizer:
            named = {file_key(name): m for name, m in moments.items()}
            write_optimizer(target, named, last_params)
        if merged is not None:
            write_merged(target, self._loaded.model, merged, self._loaded.tokenizer)

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        """Restore the adapter (and the AdamW state) from a package; zero gradients."""
        self._check_open()
        tensors = read_adapter(directory, self._layout)  # every check before any change
        if load_optimizer:
            moments, last_params = read_optimizer(directory, self._layout)
        names = self._layout.names
        with self._mutex, torch.no_grad():
            for key, name in names.items():
                self._adapter[name].copy_(tensors[key])
            if load_optimizer:
                self._optimizer.load_named_state(
                    {names[k]: m for k, m in moments.items()}, last_params
                )
            else:
                self._optimizer = LoraAdamW(self._loaded.model.named_parameters())
            self._optimizer.zero_grad()

    # -- misc ---------------------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        """The model's ``transformers`` tokenizer."""
        return self._loaded.tokenizer

    def _trim(self, nbytes: int) -> None:
        """Hand a big op's freed memory back to the OS (memory.py): sessions train on
        their own threads, and glibc would keep each one's peak in that thread's arena."""
        if self._loaded.device.type == "cpu":
            memory.trim_after(nbytes)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this engine has been closed")

    def close(self) -> None:
        """Release the model and optimizer memory; later calls raise ``RuntimeError``."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            device = self._loaded.device
            self._optimizer.zero_grad()
            self._snapshots.clear()
            self._plain_base = None
            MERGED_CACHE.drop_owner(self._cache_owner)
            del self._sampler, self._optimizer, self._loaded, self._adapter
            if self._shared is not None:
                POOL.release(self._shared)
                self._shared = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
