"""The light fake engine: the runtime's ``Engine`` protocol in plain Python, torch never loaded.

``FakeServiceClient()`` (``numerics=False``, the default) runs it. It is for loop unit tests
(scripted samples, faults, call order, futures), so it starts in milliseconds, yet its numbers
are still exact for its own model:

- The model is a bigram logit table over the 259 byte tokens: ``z[prev] = base[prev] +
  delta[prev]``. ``base`` rows are drawn lazily (seeded by the base-model name, the spec's
  seed and the row), with the numeric fake's shape (the EOS ``<|im_end|>`` raised,
  ``<|endoftext|>``/``<|im_start|>`` lowered). ``delta`` is the trainable table (one
  ``[V, V]`` parameter, zero at start, kept by row).
- ``forward_backward`` reads its inputs through :func:`~localsession.numerics.inputs.read_datums`
  (the checks and messages of the torch engine), computes ``lp = log softmax(z / T)[target]``
  and the loss of docs/semantics.md#1 per token in closed form, with its gradient
  ``dℓ/dz_j = dℓ/dlp · (1[j = target] − softmax(z / T)_j) / T``.
- ``optim_step`` is AdamW (docs/semantics.md#2) on ``delta``: decoupled weight decay,
  bias correction, global-norm clipping. There is no LoRA pair, so ``loraPlusLrRatio`` is
  accepted and has no effect; ``num_params_updated`` counts the whole table.
- Sampling answers from the :class:`~fakes.script.Script` first, then draws from the table:
  temperature, top-k, top-p, an inverse-CDF draw from ``random.Random(seed + i)``.
- Packages are JSON files that only this engine reads.

Its tables differ from the numeric fake's (``numerics=True``), so the two give different
numbers for the same spec; each is deterministic.
"""

from __future__ import annotations

import json
import math
import random
import threading
import zlib
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fakes.clock import Gate
from fakes.light_math import Row, lp_row, sample_row, token_loss
from fakes.script import Completion, Script, check_stop_ids, scripted_tokens, stop_reason
from fakes.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, ByteTokenizer
from localsession import vocab
from localsession.numerics.inputs import (
    clip_config,
    finite_or_raise,
    read_datums,
    token_ids,
)
from localsession.port import (
    AdamHyperparams,
    EngineInputError,
    EngineSpec,
    LossConfig,
    SampleRequest,
    TrainingDatum,
)
from localsession.port_results import (
    ForwardResult,
    OptimResult,
    SampledSequence,
    SampleResult,
    StopReason,
    TopLogprob,
)

FORMAT = "localsession-fakes-light/1"
PACKAGE, OPTIMIZER = "light_package.json", "light_optimizer.json"
EOS_BIAS, SPECIAL_PENALTY = 3.0, -8.0
_TOKENIZER = ByteTokenizer()


class LightEngine:
    """One session's table, its gradient, its AdamW state and its saved snapshots."""

    def __init__(
        self, spec: EngineSpec, *, script: Script | None = None, knobs: Any = None,
        manual: bool = False,
    ) -> None:  # fmt: skip
        self.spec = spec
        self.script = script or Script()
        self.knobs = knobs
        self.gate = Gate(manual)
        self.tokenizer = ByteTokenizer()
        self.lock = threading.Lock()
        self.steps = 0
        self._seed = zlib.crc32(spec.base_model.encode("utf-8")) + 1_000_003 * spec.seed
        self._base: dict[int, Row] = {}
        self.delta: dict[int, Row] = {}
        self.grad: dict[int, Row] = {}
        #: AdamW state: one step count (the table is one parameter), moments by row.
        self.adam_step = 0
        self.exp_avg: dict[int, Row] = {}
        self.exp_avg_sq: dict[int, Row] = {}
        self.last_params: AdamHyperparams | None = None
        self._snapshots: dict[str, dict[int, Row]] = {}

    # -- the model -----------------------------------------------------------------------

    def base_row(self, prev: int) -> Row:
        row = self._base.get(prev)
        if row is None:
            rng = random.Random(self._seed * 7919 + prev)
            row = [rng.gauss(0.0, 1.0) for _ in range(VOCAB_SIZE)]
            row[EOS_ID] += EOS_BIAS
            row[PAD_ID] += SPECIAL_PENALTY
            row[BOS_ID] += SPECIAL_PENALTY
            self._base[prev] = row
        return row

    def row(self, prev: int, delta: dict[int, Row] | None = None) -> Row:
        """Next-token logits after ``prev``: the live table, or ``delta``'s if given."""
        base = self.base_row(prev)
        d = (self.delta if delta is None else delta).get(prev)
        return base if d is None else [b + x for b, x in zip(base, d, strict=True)]

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
        rows = read_datums(datums, loss_fn, VOCAB_SIZE)
        grads: dict[int, Row] = {}
        lp_rows: list[list[float]] = []
        loss_rows: list[list[float]] = []
        sums = {"w": 0.0, "clipped": 0.0, "kl": 0.0, "ref": 0.0}
        with self.lock:
            for datum in rows:
                lps, losses = [], []
                for t, (prev, target) in enumerate(zip(datum.tokens, datum.targets, strict=True)):
                    col = {key: values[t] for key, values in datum.columns.items()}
                    temp = col.get("temperature", 1.0)
                    lp, probs = lp_row(self.row(prev), target, temp)
                    loss, dloss, clipped = token_loss(loss_fn, lp, col, clip)
                    w = col["weights"]
                    if w != 0.0:
                        sums["w"] += w
                        sums["clipped"] += w * clipped
                        if "logprobs" in col:
                            sums["kl"] += w * (col["logprobs"] - lp)
                        if "ref_log_prob" in col:
                            sums["ref"] += w * (lp - col["ref_log_prob"])
                    if backward and dloss != 0.0:
                        g = grads.setdefault(prev, [0.0] * VOCAB_SIZE)
                        for j, p in enumerate(probs):
                            g[j] -= dloss * p / temp
                        g[target] += dloss / temp
                    lps.append(lp)
                    losses.append(loss)
                lp_rows.append(lps)
                loss_rows.append(losses)
            total = sum(sum(r) for r in loss_rows)
            finite_or_raise(total, "the loss")  # before any gradient
            for prev, g in grads.items():
                acc = self.grad.setdefault(prev, [0.0] * VOCAB_SIZE)
                for j, x in enumerate(g):
                    acc[j] += x
        # Gradients are sums; the reported loss is the mean over datums of each datum's sum.
        per_datum = [sum(r) for r in loss_rows]
        metrics: dict[str, float] = {
            vocab.Metric.LOSS: total / len(rows),
            vocab.Metric.PG_LOSS: total / len(rows),
        }
        if loss_fn in vocab.RL_LOSSES:
            metrics[vocab.Metric.PG_CLIPFRAC] = _mean(sums["clipped"], sums["w"])
            metrics[vocab.Metric.PPO_KL] = _mean(sums["kl"], sums["w"])
        if all("ref_log_prob" in d.columns for d in rows):
            metrics[vocab.Metric.KL_REF] = _mean(sums["ref"], sums["w"])
        lengths = [len(d.tokens) for d in rows]
        return ForwardResult.from_rows(
            lengths, lp_rows, loss_rows, metrics, {vocab.Metric.PG_LOSS: per_datum}
        )

    def optim_step(self, adam_params: AdamHyperparams) -> OptimResult:
        return OptimResult(self._step(adam_params))

    def _step(self, adam_params: AdamHyperparams) -> dict[str, float]:
        self.gate.pass_through()
        hp = adam_params
        hp.check()  # before any change
        with self.lock:
            self.last_params = hp
            self.steps += 1
            metrics: dict[str, float] = {
                vocab.Metric.LEARNING_RATE: hp.learning_rate,
                vocab.Metric.GRAD_NORM: 0.0,
            }
            metrics[vocab.Metric.NUM_PARAMS_UPDATED] = 0.0
            if not self.grad:
                return metrics
            norm = math.sqrt(sum(x * x for g in self.grad.values() for x in g))
            metrics[vocab.Metric.GRAD_NORM] = norm if math.isfinite(norm) else 0.0
            grads, self.grad = self.grad, {}
            if hp.learning_rate == 0.0:
                return metrics
            coef = 1.0
            if hp.grad_clip_norm is not None and hp.grad_clip_norm > 0:
                coef = min(1.0, hp.grad_clip_norm / (norm + 1e-6))
            self.adam_step += 1
            step, lr = self.adam_step, hp.learning_rate
            bias1, bias2_sqrt = 1.0 - hp.beta1**step, math.sqrt(1.0 - hp.beta2**step)
            for prev in set(grads) | set(self.exp_avg):
                g = grads.get(prev)
                p = self.delta.setdefault(prev, [0.0] * VOCAB_SIZE)
                m = self.exp_avg.setdefault(prev, [0.0] * VOCAB_SIZE)
                v = self.exp_avg_sq.setdefault(prev, [0.0] * VOCAB_SIZE)
                for j in range(VOCAB_SIZE):
                    gj = 0.0 if g is None else g[j] * coef
                    m[j] = hp.beta1 * m[j] + (1.0 - hp.beta1) * gj
                    v[j] = hp.beta2 * v[j] + (1.0 - hp.beta2) * gj * gj
                    p[j] *= 1.0 - lr * hp.weight_decay
                    p[j] -= (lr / bias1) * m[j] / (math.sqrt(v[j]) / bias2_sqrt + hp.eps)
            metrics[vocab.Metric.NUM_PARAMS_UPDATED] = float(VOCAB_SIZE * VOCAB_SIZE)
        return metrics

    # -- sampling ------------------------------------------------------------------------

    def _delta_of(self, weights: str | None) -> dict[int, Row] | None:
        if weights is None:
            return {}  # the base model
        cached = self._snapshots.get(weights)
        if cached is None:
            cached = self._snapshots[weights] = self._read(Path(weights))["delta"]
        return cached

    def sample(self, weights: str | None, requests: list[SampleRequest]) -> list[SampleResult]:
        delta = self._delta_of(weights)
        return [self._sample_one(delta, req, f"request {i}") for i, req in enumerate(requests)]

    def _sample_one(
        self, delta: dict[int, Row] | None, req: SampleRequest, what: str
    ) -> SampleResult:
        prompt = _check_prompt(req.prompt, f"{what}: `prompt`")
        check_stop_ids(req, what)
        scripted = self.script.resolve_request(prompt, req, what)
        with self.lock:
            sequences = [
                self._generate(delta, req, i) if c is None else self._scripted(delta, req, c)
                for i, c in enumerate(scripted)
            ]
            topk = req.topk_prompt_logprobs or 0
            if not (req.include_prompt_logprobs or topk > 0):
                return SampleResult(sequences)
            values, top = self._prompt_logprobs(delta, prompt, topk)
        return SampleResult(
            sequences,
            prompt_logprobs=values if req.include_prompt_logprobs else None,
            topk_prompt_logprobs=top if topk > 0 else None,
        )

    def _generate(
        self, delta: dict[int, Row] | None, req: SampleRequest, i: int
    ) -> SampledSequence:
        rng = random.Random((req.seed + i) % 2**63)
        tokens: list[int] = []
        logprobs: list[float] = []
        reason: StopReason | None = None if req.max_tokens > 0 else "length"
        prev = req.prompt[-1]
        while reason is None:
            token, lp = sample_row(self.row(prev, delta), req, rng)
            tokens.append(token)
            logprobs.append(lp)
            prev, reason = token, stop_reason(tokens, req.stop, req.max_tokens, req.stop_token_ids)
        return SampledSequence(tokens, logprobs, reason)

    def _scripted(
        self, delta: dict[int, Row] | None, req: SampleRequest, completion: Completion
    ) -> SampledSequence:
        tokens, reason = scripted_tokens(completion, req.stop, req.max_tokens, req.stop_token_ids)
        if completion.logprobs is not None:
            logprobs = [float(x) for x in completion.logprobs[: len(tokens)]]
        else:
            temp = req.temperature if req.temperature > 0 else 1.0
            prevs = [req.prompt[-1], *tokens[:-1]]
            logprobs = [
                lp_row(self.row(p, delta), t, temp)[0] for p, t in zip(prevs, tokens, strict=True)
            ]
        return SampledSequence(tokens, logprobs, reason)

    def _prompt_logprobs(
        self, delta: dict[int, Row] | None, tokens: list[int], topk: int
    ) -> tuple[list[float], list[list[TopLogprob]]]:
        values: list[float] = [0.0]
        top: list[list[TopLogprob]] = [[]] if topk > 0 else []
        for prev, target in zip(tokens[:-1], tokens[1:], strict=True):
            lp, probs = lp_row(self.row(prev, delta), target, 1.0)
            values.append(lp)
            if topk > 0:
                best = sorted(range(VOCAB_SIZE), key=lambda j: -probs[j])[:topk]
                top.append([TopLogprob(j, math.log(probs[j])) for j in best])
        return values, (top if len(tokens) > 1 else [])

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        delta = self._delta_of(weights)
        with self.lock:
            values, _ = self._prompt_logprobs(delta, _check_prompt(tokens, "`prompt`"), 0)
        out: list[float | None] = [None, *values[1:]]
        if self.knobs is not None and self.knobs.take_truncation():
            out = out[:-1]  # injected: the sampler returns a short result
        return out

    # -- packages ------------------------------------------------------------------------

    def save_package(self, directory: str, *, include_optimizer: bool, merge_weights: bool) -> None:
        self.gate.pass_through()
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        with self.lock:
            meta = {
                "format": FORMAT,
                "base_model": self.spec.base_model,
                "rank": self.spec.rank,
                "alpha": self.spec.alpha,
                "seed": self.spec.seed,
                "optimizer_steps": self.steps,
                "merged": merge_weights,
                "delta": {str(k): v for k, v in self.delta.items()},
            }
            state = {
                "step": self.adam_step,
                "exp_avg": {str(k): v for k, v in self.exp_avg.items()},
                "exp_avg_sq": {str(k): v for k, v in self.exp_avg_sq.items()},
                "last_params": asdict(self.last_params) if self.last_params else None,
            }
        (target / PACKAGE).write_text(json.dumps(meta))
        if include_optimizer:
            (target / OPTIMIZER).write_text(json.dumps(state))

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            meta = json.loads((path / PACKAGE).read_text())
        except (OSError, ValueError) as exc:
            raise EngineInputError(
                f"package at {path} was not written by the light fake engine ({exc}); the "
                "fakes load only packages their own sessions saved"
            ) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise EngineInputError(f"package at {path} is not in the format {FORMAT}")
        meta["delta"] = {int(k): v for k, v in meta["delta"].items()}
        return meta

    def load_package(self, directory: str, *, load_optimizer: bool) -> None:
        self.gate.pass_through()
        path = Path(directory)
        meta = self._read(path)  # every check before any change
        state = None
        if load_optimizer:
            try:
                state = json.loads((path / OPTIMIZER).read_text())
            except (OSError, ValueError):
                raise EngineInputError(
                    f"package at {path} holds no optimizer state; load it with load_state "
                    "(without the optimizer), or save it with save_state"
                ) from None
        with self.lock:
            self.delta = {k: list(v) for k, v in meta["delta"].items()}
            self.grad = {}
            self.adam_step, self.exp_avg, self.exp_avg_sq = 0, {}, {}
            if state is not None:
                self.adam_step = int(state["step"])
                self.exp_avg = {int(k): v for k, v in state["exp_avg"].items()}
                self.exp_avg_sq = {int(k): v for k, v in state["exp_avg_sq"].items()}
                last = state["last_params"]
                self.last_params = AdamHyperparams(**last) if last else None

    # -- misc ----------------------------------------------------------------------------

    def get_tokenizer(self) -> ByteTokenizer:
        return self.tokenizer

    def close(self) -> None:
        self.gate.set_manual(False)
        self._snapshots.clear()


def _mean(total: float, weight: float) -> float:
    out = total / weight if weight else 0.0
    return out if math.isfinite(out) else 0.0


def _check_prompt(tokens: list[int], what: str) -> list[int]:
    if not tokens:
        raise EngineInputError(f"{what} must be a non-empty list of token ids")
    return token_ids(list(tokens), VOCAB_SIZE, what)
