"""``TorchEngine``: the real engine behind a session (the ``Engine`` protocol in torch).

One instance holds one session's LoRA adapter, AdamW state and accumulated gradients, on a
view of a base that every session on it shares (``base_pool``: one copy of the weights per
model, device, dtype and placement). All compute runs under the session's lock, so a sampling
batch never sees a half-applied update (localsession.port threading contract).

- ``forward_backward`` / ``forward`` share one code path (under ``torch.no_grad`` for
  ``forward``): logprobs agree bit for bit; one right-padded batch, the loss a plain sum.
- Inputs arrive parsed (``port.TrainingDatum``, ``LossConfig``, ``AdamHyperparams``); their
  semantic checks run before any tensor moves, and an ``EngineInputError`` changes nothing.
- ``sample`` / ``compute_logprobs`` with ``weights=None`` read the *base* model (adapter
  disabled); with a package directory they read that package's adapter snapshot, never the
  live training weights (docs/semantics.md#3). Snapshots are loaded lazily and cached (LRU);
  decoding runs on a plain copy of the model (``decoders``, ``merged``): the base layers
  themselves for the base, else the snapshot merged in float32, held in ``MERGED_CACHE``
  under its budget (a larger copy is never made: that snapshot decodes through the peft
  model instead).
  ``compute_logprobs`` reads that model too, concurrent prompts in one right-padded forward
  (a lone prompt agrees with ``forward`` exactly for the base, to ~1e-6 for a merged
  snapshot). Prompt logprobs of a ``sample`` request swap the snapshot into the peft adapter
  under the lock and restore the live tensors bit for bit, so they match ``forward``.
  Requests may join a running batch (``admit``); ``on_token`` hears each decoded token.
- ``save_package`` / ``load_package`` (docs/semantics.md#5, file formats in ``checkpoint``):
  tensors are copied under the lock and written outside it; a load reads and checks every
  file before anything live changes, then copies into the existing parameters so the
  optimizer's references stay valid.

Beside it: ``train_step`` (loss, gradients, CPU micro-batches), ``shared_prefix`` (a shared
prefix runs once), ``compiled`` (the opt-in ``torch.compile`` training forward),
``snapshots`` (package adapters), ``decoders`` (which plain model decodes), ``sampling``
(the decoder), ``scoring`` (prompt, target and alternative-token logprobs),
``request_checks``, ``mixed_sampling`` (several adapters in one batch: ``sample_mixed``).
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from localsession import port
from localsession.engine import cuda_attention, memory, scoring, shared_prefix, thread_policy
from localsession.engine.base_pool import POOL, SharedBase, load_shared
from localsession.engine.checkpoint import (
    adapter_config_dict,
    adapter_layout,
    file_key,
    merged_state_dict,
    read_adapter,
    read_optimizer,
    write_adapter,
    write_merged,
    write_optimizer,
)
from localsession.engine.compiled import TrainingForward
from localsession.engine.decoders import Decoders
from localsession.engine.flops import count_params, model_flops, peak_flops, throughput_metrics
from localsession.engine.loading import LoadedModel
from localsession.engine.mixed_sampling import MixedSampling
from localsession.engine.request_checks import admitter, check_logprobs_prompt, check_request
from localsession.engine.sampling import BatchSampler
from localsession.engine.snapshots import SnapshotCache, use_weights
from localsession.engine.streams import as_sequence
from localsession.engine.thread_state import plain_torch_thread
from localsession.engine.train_step import loss_step, prepare
from localsession.numerics.optim import LoraAdamW
from localsession.port import Admit, EngineSpec, SampleRequest, TrainingDatum
from localsession.port_results import ForwardResult, OptimResult, SampleResult


class TorchEngine(MixedSampling):
    """One session's LoRA model on a local device (CPU float32 or CUDA bfloat16)."""

    def __init__(self, spec: EngineSpec, loaded: LoadedModel | None = None) -> None:
        self.spec = spec
        options = spec.options  # checked when they were read (engine_options.py)
        #: the shared base this session's adapter sits on (base_pool.py); None when the
        #: caller handed in its own ``loaded`` model
        self._shared: SharedBase | None = None
        if loaded is None:
            loaded, self._shared = load_shared(spec)
        self._loaded = loaded
        cuda_attention.configure(loaded.device, options.cudnn_attention)
        #: torch threads per op (thread_policy.scope): None follows the free cores
        self._threads = options.threads or None
        self._mutex = threading.Lock()
        self._optimizer = LoraAdamW(self._loaded.model.named_parameters())
        self._train_forward = TrainingForward(
            self._loaded.model, self._loaded.device, options.compile
        )
        self._sampler = BatchSampler(
            self._loaded.model,
            self._loaded.tokenizer,
            self._loaded.eos_ids,
            self._loaded.pad_id,
            self._loaded.device,
            options.decode,
            options.decode_compile,
        )
        self._layout = adapter_layout(self._loaded.model)
        #: live parameter name -> the trainable (LoRA) parameter, in model order
        self._adapter: dict[str, torch.nn.Parameter] = {
            name: p for name, p in self._loaded.model.named_parameters() if p.requires_grad
        }
        #: package adapters loaded for sampling (snapshots.py)
        self._snapshots = SnapshotCache(
            self._layout, self._adapter, budget=options.snapshot_cache_bytes
        )
        #: Decoding models (decoders.py): the plain base model (shares every tensor), and
        #: merged snapshot copies in the process-wide ``MERGED_CACHE`` under its owner.
        self._decoders = Decoders(
            self._loaded.model, self._adapter, self._loaded.dtype, self._loaded.device, options
        )
        #: Most positions taken: a map entry's ``max_context``, else the model's (None: unknown)
        self.max_positions: int | None = (spec.model and spec.model.max_context) or (
            int(getattr(self._loaded.model.config, "max_position_embeddings", 0) or 0) or None
        )
        #: (non-embedding parameters, layers, width) for the FLOP count (flops.py)
        self._shape = count_params(self._loaded.model)
        #: rough bytes of activations (or KV cache) per token, for ``memory.after_op``
        config = getattr(self._loaded.model.get_base_model(), "config", None)
        layers = int(getattr(config, "num_hidden_layers", 1) or 1)
        hidden = int(getattr(config, "hidden_size", 64) or 64)
        self._token_bytes = 2 * layers * hidden * 4
        self._released = False

    def retune(self, *, shared_prefix_mode: str | None = None, threads: int | None = None) -> None:
        """Run later ops with another shared-prefix mode (``auto``, ``on``, ``off``) or thread
        count (0: follow the free cores), the two options read at each op: the benches and
        tests compare both settings on one engine's weights."""
        options = self._loaded.options
        if shared_prefix_mode is not None:
            if shared_prefix_mode not in shared_prefix.MODES:
                raise ValueError(f"shared-prefix mode {shared_prefix_mode!r}: use auto, on or off")
            options = dataclasses.replace(options, shared_prefix=shared_prefix_mode)
        if threads is not None:
            if threads < 0:
                raise ValueError(f"threads {threads!r}: use 0 (auto) or a count of at least 1")
            options = dataclasses.replace(options, threads=threads)
        with self._mutex:
            self._loaded.options = options
            self._threads = options.threads or None

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

    #: whether a training op may run on the calling thread (port.Engine.runs_in_caller)
    runs_in_caller = staticmethod(plain_torch_thread)

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: port.LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        """Run the loss (docs/semantics.md#1) over parsed datums; accumulate gradients when
        ``backward``. The step, numbered, is train_step.py's."""
        self._check_open()
        m = self._loaded
        step = prepare(datums, loss_fn, loss_fn_config, m, self._shape, self.max_positions)
        if step is None:
            return ForwardResult.empty()
        batch, plan = step.batch, step.plan
        mode: AbstractContextManager[Any] = torch.enable_grad() if backward else torch.no_grad()
        try:
            with (
                self._mutex,
                mode,
                thread_policy.scope(self._threads),
            ):  # torch threads: thread_policy.py
                start = time.perf_counter()
                fwd, optimizer = self._train_forward, self._optimizer
                result = loss_step(fwd, optimizer, step, backward, m.device, m.vocab_size)
                seconds = time.perf_counter() - start  # .tolist() in forward_result synchronised
        finally:
            self._trim(int(batch.tokens_BT.numel()) * (self._token_bytes + 4 * self.vocab_size))
        run = list(plan.row_lengths) if plan else batch.lengths  # the rows computed
        flops = model_flops(*self._shape, run, backward=backward)
        peak = peak_flops(self._loaded.device, self._loaded.dtype)
        result.metrics.update(throughput_metrics(flops, seconds, peak))
        return result

    def forward(
        self, datums: Sequence[TrainingDatum], loss_fn: str, loss_fn_config: port.LossConfig | None
    ) -> ForwardResult:
        """``forward_backward(..., backward=False)``."""
        return self.forward_backward(datums, loss_fn, loss_fn_config, backward=False)

    def optim_step(self, adam_params: port.AdamHyperparams) -> OptimResult:
        """Apply and zero the accumulated gradients with AdamW (docs/semantics.md#2)."""
        self._check_open()
        with self._mutex:
            return OptimResult(self._optimizer.step(adam_params))

    def zero_grad(self) -> None:
        """Drop accumulated gradients (``load_state`` does this)."""
        with self._mutex:
            self._optimizer.zero_grad()

    # -- sampling -----------------------------------------------------------------------

    admits_requests = True  #: ``sample`` takes ``admit`` (port.Admit)

    def sample(
        self, weights: str | None, requests: list[SampleRequest], admit: Admit | None = None
    ) -> list[SampleResult]:
        """Run sample requests as one batch (docs/semantics.md#3), joined by ``admit`` s."""
        self._check_open()
        checked = [
            check_request(i, r, self.vocab_size, self.max_positions) for i, r in enumerate(requests)
        ]
        if not checked:
            return []
        joiner = admit and admitter(admit, checked, self.vocab_size, self.max_positions)
        key, snapshot = self._snapshots.get(weights)
        with self._mutex, torch.no_grad(), thread_policy.scope(self._threads):
            decoder = self._decoders.get(key, snapshot)  # None: the peft model, snapshot in
            with nullcontext() if decoder is not None else self._use_weights(snapshot):
                grouped = self._sampler.run(checked, decoder, joiner)
            responses = [SampleResult([as_sequence(s) for s in streams]) for streams in grouped]
            wanted = [i for i, req in enumerate(checked) if scoring.asks_prompt_scores(req)]
            if wanted:  # on the peft model: bit-identical to ``forward`` (prompt_logprobs)
                with self._use_weights(snapshot):
                    for i in wanted:
                        responses[i] = scoring.with_prompt_scores(
                            responses[i], self._loaded.model, checked[i], self._loaded.device
                        )
        streams = sum(r.num_samples * (len(r.prompt) + r.max_tokens) for r in checked)
        self._trim(streams * self._token_bytes)
        return responses

    def _use_weights(
        self, snapshot: dict[str, torch.Tensor] | None
    ) -> AbstractContextManager[None]:
        """``snapshots.use_weights`` on this session's model (caller holds the lock)."""
        return use_weights(self._loaded.model, self._adapter, snapshot)

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        """Per-token log p(tokens[i] | tokens[:i]) at T = 1; entry 0 is ``None``."""
        return self.compute_logprobs_batch(weights, [tokens])[0]

    def compute_logprobs_batch(
        self, weights: str | None, prompts: list[list[int]]
    ) -> list[list[float | None]]:
        """``compute_logprobs`` of several prompts on the same weights, batched (port)."""
        self._check_open()
        m = self._loaded
        checked = [check_logprobs_prompt(t, self.vocab_size, self.max_positions) for t in prompts]
        key, snapshot = self._snapshots.get(weights)
        with self._mutex, torch.no_grad(), thread_policy.scope(self._threads):
            decoder = self._decoders.get(key, snapshot)  # the sampler's model, if one
            with nullcontext() if decoder is not None else self._use_weights(snapshot):
                model = decoder if decoder is not None else m.model
                rows = shared_prefix.batch_logprobs(model, checked, m, self._shape)
        self._trim(sum(map(len, checked)) * (self._token_bytes + 4 * self.vocab_size))
        return [[None, *row] for row in rows]

    # -- packages -----------------------------------------------------------------------

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        """Write the adapter (+ optimizer state, + merged model) into ``directory``."""
        self._check_open()
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        with self._mutex:
            adapter = {
                file_key(name): p.detach().to("cpu", copy=True) for name, p in self._adapter.items()
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
        """After an op over ``nbytes`` of tensors: mark this thread's arena for a trim
        (memory.py), so the next op on another thread hands this one's peak back first."""
        if self._loaded.device.type == "cpu":
            memory.after_op(nbytes)

    def _check_open(self) -> None:
        """Refuse a closed engine; on the CPU, first hand back the memory another thread's
        large op left in its arena (memory.py)."""
        if self._released:
            raise RuntimeError("this engine has been closed")
        if self._loaded.device.type == "cpu":
            memory.before_op()

    def close(self) -> None:
        """Release the model and optimizer memory; later calls raise ``RuntimeError``."""
        with self._mutex:
            if self._released:
                return
            self._released = True
            device = self._loaded.device
            self._optimizer.zero_grad()
            self._snapshots.clear()
            self._decoders.drop()
            del self._sampler, self._optimizer, self._loaded, self._adapter, self._snapshots
            del self._decoders  # holds the model
            del self._train_forward  # holds the model (and a compiled graph)
            if self._shared is not None:
                POOL.release(self._shared)
                self._shared = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
