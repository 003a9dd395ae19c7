"""The fake engine: the runtime's ``Engine`` protocol over the bigram model, instant and exact.

Training uses the numerics the torch engine uses (:mod:`localsession.numerics`):
``inputs.read_datums`` (every input check, as the light fake's), ``losses.compute_loss`` (the
losses and metrics of docs/semantics.md#1) and ``adamw.PlainAdamW`` (the AdamW update of
docs/semantics.md#2, in tensor ops, so no ``torch._dynamo`` import), so losses, gradients
and ``optim_step`` are real numbers with the documented math; only the model differs
(:mod:`fakes.model`). Sampling answers from the :class:`~fakes.script.Script` first and
falls back to the model (:mod:`fakes.sampler`).
Packages are safetensors + JSON that only the fake engine reads.

In manual-clock mode each training call waits at :attr:`FakeEngine.gate` until the fake's
clock lets it through (see :mod:`fakes.fake_service`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from fakes.clock import Gate
from fakes.knobs import EngineKnobs
from fakes.model import BigramLora
from fakes.sampler import compute_logprobs, sample_request
from fakes.script import Script
from fakes.tokenizer import PAD_ID, VOCAB_SIZE, ByteTokenizer
from localsession.numerics.adamw import PlainAdamW
from localsession.numerics.inputs import (
    finite_or_raise,
    read_datums,
)
from localsession.numerics.losses import (
    LossInputs,
    clip_config,
    compute_loss,
    token_logprobs,
)
from localsession.numerics.optim import NamedMoments
from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    EngineSpec,
    LossConfig,
    SampleRequest,
    TrainingDatum,
)
from localsession.port_results import ForwardResult, OptimResult, SampleResult


class _Padded:
    """Checked datums (``read_datums``) as right-padded ``[B, T]`` tensors and loss inputs."""

    def __init__(self, datums: Sequence[TrainingDatum], loss_fn: str) -> None:
        rows = read_datums(datums, loss_fn, VOCAB_SIZE)
        self.lengths = [len(r.tokens) for r in rows]
        width = max(self.lengths)

        def pad(lists: list[list[Any]], fill: float, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([x + [fill] * (width - len(x)) for x in lists], dtype=dtype)

        def column(key: str, fill: float) -> torch.Tensor | None:
            if not any(key in r.columns for r in rows):
                return None  # only temperature may be left out by some datums (read_datums)
            given = [r.columns.get(key, [1.0] * len(r.tokens)) for r in rows]
            return pad(given, fill, torch.float32)

        self.tokens_BT = pad([r.tokens for r in rows], PAD_ID, torch.long)
        self.targets_BT = pad([r.targets for r in rows], 0, torch.long)
        self.temperature_BT = column("temperature", 1.0)
        weights_BT = column("weights", 0.0)
        assert weights_BT is not None  # every loss needs it
        lengths_B = torch.tensor(self.lengths)
        padded = min(self.lengths) < width
        self.inputs = LossInputs(
            weights=weights_BT,
            sampler_logprobs=column("logprobs", 0.0),
            advantages=column("advantages", 0.0),
            ref_logprobs=column("ref_log_prob", 0.0),
            mask=torch.arange(width) < lengths_B[:, None] if padded else None,
        )


FORMAT = "localsession-fakes-bigram/1"
ADAPTER, META = "fake_adapter.safetensors", "fake_package.json"
OPTIMIZER, OPTIMIZER_META, MERGED = (
    "fake_optimizer.safetensors",
    "fake_optimizer.json",
    "fake_merged.safetensors",
)


class FakeEngine:
    """One session's fake model, optimizer and package snapshots."""

    def __init__(
        self,
        spec: EngineSpec,
        *,
        script: Script | None = None,
        knobs: EngineKnobs | None = None,
        manual: bool = False,
    ) -> None:
        self.spec = spec
        self.model = BigramLora(spec)
        self._optimizer: PlainAdamW | None = None  # made on first use (see `optimizer`)
        self.script = script or Script()
        self.knobs = knobs or EngineKnobs()
        self.gate = Gate(manual)
        self.tokenizer = ByteTokenizer()
        self.lock = threading.Lock()
        #: Optimizer steps applied so far (recorded in saved packages).
        self.steps = 0
        self._snapshots: dict[str, torch.Tensor] = {}

    @property
    def optimizer(self) -> PlainAdamW:
        """The AdamW state, made on first use. It is :class:`PlainAdamW` (tensor ops), not
        ``torch.optim.AdamW``, whose construction imports ``torch._dynamo`` (over a second)."""
        if self._optimizer is None:
            self._optimizer = PlainAdamW(self.model.named_parameters())
        return self._optimizer

    # -- training ------------------------------------------------------------------------

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss_fn: str,
        loss_fn_config: LossConfig | None,
        *,
        backward: bool,
    ) -> ForwardResult:
        self.gate.pass_through()
        clip = clip_config(loss_fn, loss_fn_config)
        if not datums:
            return ForwardResult.empty()
        batch = _Padded(datums, loss_fn)
        grad: AbstractContextManager[Any] = torch.enable_grad() if backward else torch.no_grad()
        with self.lock, grad:
            logits_BTV = self.model.logits(batch.tokens_BT)
            lp_BT = token_logprobs(logits_BTV, batch.targets_BT, batch.temperature_BT)
            loss_BT, metrics = compute_loss(loss_fn, lp_BT, batch.inputs, clip)
            total = loss_BT.sum()
            finite_or_raise(float(total.detach()), "the loss")  # before any gradient
            if backward:
                total.backward()
        return ForwardResult.from_rows(batch.lengths, lp_BT.tolist(), loss_BT.tolist(), metrics)

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        self.gate.pass_through()
        with self.lock:
            metrics = self.optimizer.step(adam_params)
            self.steps += 1
        return OptimResult(metrics)

    # -- sampling ------------------------------------------------------------------------

    def _weights(self, weights: str | None) -> torch.Tensor:
        """The [V, V] table a sampler reads: the base model, or a saved package's."""
        if weights is None:
            return self.model.base_VV
        cached = self._snapshots.get(weights)
        if cached is None:
            adapter = self._read_adapter(Path(weights))
            cached = self._snapshots[weights] = self.model.table(adapter)
        return cached

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        table_VV = self._weights(weights)
        return [
            sample_request(table_VV, req, self.script, f"request {i}")
            for i, req in enumerate(requests)
        ]

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        values = compute_logprobs(self._weights(weights), tokens)
        if self.knobs.take_truncation():  # injected: the sampler returns a short result
            values = values[:-1]
        return values

    # -- packages ------------------------------------------------------------------------

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        self.gate.pass_through()
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        with self.lock:
            adapter = {n: p.detach().clone() for n, p in self.model.named_parameters()}
            fresh = self._optimizer is None  # never stepped: no moments yet
            moments = self.optimizer.named_state() if include_optimizer and not fresh else {}
            last = None if fresh else self.optimizer.last_params
            table = self.model.table() if merge_weights else None
            steps = self.steps
        meta = {
            "format": FORMAT,
            "base_model": self.spec.base_model,
            "rank": self.spec.rank,
            "alpha": self.spec.alpha,
            "seed": self.spec.seed,
            "optimizer_steps": steps,
        }
        save_file(adapter, str(target / ADAPTER))
        (target / META).write_text(json.dumps(meta, indent=2))
        if include_optimizer:
            tensors = {}
            for name, m in moments.items():
                tensors[f"{name}.exp_avg"] = m.exp_avg
                tensors[f"{name}.exp_avg_sq"] = m.exp_avg_sq
            save_file(tensors, str(target / OPTIMIZER))
            state = {
                "steps": {name: m.step for name, m in moments.items()},
                "last_params": asdict(last) if last is not None else None,
            }
            (target / OPTIMIZER_META).write_text(json.dumps(state, indent=2))
        if table is not None:
            save_file({"logits": table.contiguous()}, str(target / MERGED))

    def _read_adapter(self, path: Path) -> dict[str, torch.Tensor]:
        try:
            meta = json.loads((path / META).read_text())
            tensors = load_file(str(path / ADAPTER))
        except (OSError, ValueError) as exc:
            raise EngineInputError(
                f"package at {path} was not written by the fake engine ({exc}); the fakes "
                "load only packages their own sessions saved"
            ) from None
        if meta.get("format") != FORMAT:
            raise EngineInputError(
                f"package at {path} has format {meta.get('format')!r}, not {FORMAT}"
            )
        for name, p in self.model.named_parameters():
            if name not in tensors or tensors[name].shape != p.shape:
                raise EngineInputError(
                    f"package at {path}: `{name}` is missing or has the wrong shape for a "
                    f"rank-{self.spec.rank} adapter"
                )
        return tensors

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        self.gate.pass_through()
        path = Path(directory)
        tensors = self._read_adapter(path)  # every check before any change
        moments: dict[str, NamedMoments] = {}
        last: AdamHyperparams | None = None
        if load_optimizer:
            try:
                state = json.loads((path / OPTIMIZER_META).read_text())
                saved = load_file(str(path / OPTIMIZER))
            except (OSError, ValueError):
                raise EngineInputError(
                    f"package at {path} holds no optimizer state; load it with load_state "
                    "(without the optimizer), or save it with save_state"
                ) from None
            moments = {
                name: NamedMoments(step, saved[f"{name}.exp_avg"], saved[f"{name}.exp_avg_sq"])
                for name, step in state["steps"].items()
            }
            if state["last_params"] is not None:
                last = AdamHyperparams(**state["last_params"])
        with self.lock, torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(tensors[name])
            if load_optimizer:
                self.optimizer.load_named_state(moments, last)
            else:
                self._optimizer = None  # a fresh optimizer on next use
            for _, p in self.model.named_parameters():
                p.grad = None

    # -- misc ----------------------------------------------------------------------------

    def table(self) -> torch.Tensor:
        """The live [V, V] logit table (a detached copy): what ``forward`` computes with."""
        with self.lock:
            return self.model.table().clone()

    def get_tokenizer(self) -> ByteTokenizer:
        return self.tokenizer

    def close(self) -> None:
        self.gate.set_manual(False)
        self._snapshots.clear()
