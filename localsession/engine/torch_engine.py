"""``TorchEngine``: the real engine behind a session (the ``Engine`` protocol in torch).

One instance holds one session's base model with its trainable LoRA adapter, the AdamW state
and the accumulated gradients. All compute runs under one lock, so a sampling batch never sees
a half-applied update (engine_api threading contract).

- ``forward_backward`` / ``forward`` share one code path (``forward`` runs it under
  ``torch.no_grad``), so their logprobs agree bit for bit. Datums are right-padded into one
  batch; the loss is the plain sum over real tokens (local-semantics §1).
- Inputs are validated before any tensor reaches the model; an ``EngineInputError`` leaves
  no gradient behind.
- ``sample`` / ``compute_logprobs`` with ``weights=None`` read the *base* model (adapter
  disabled): samplers only ever see saved packages (local-semantics §3). Named packages come
  with the checkpoint work; until then a non-None key is rejected.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from localsession.engine.datums import (
    Batch,
    check_vocab,
    finite_or_raise,
    int_tensor,
    parse_datums,
)
from localsession.engine.losses import (
    ClipConfig,
    LossInputs,
    check_loss_fn,
    compute_loss,
    parse_loss_config,
    token_logprobs,
)
from localsession.engine.model import LoadedModel, load_model
from localsession.engine.optim import AdamParams, LoraAdamW
from localsession.engine.sampling import BatchSampler, prompt_logprobs
from localsession.runtime.engine_api import EngineInputError, EngineSpec, SampleRequest


def _tensor_data(values: list[float]) -> dict[str, Any]:
    return {"data": values, "dtype": "float32", "shape": [len(values)]}


class TorchEngine:
    """One session's LoRA model on a local device (CPU float32 or CUDA bfloat16)."""

    def __init__(self, spec: EngineSpec, loaded: LoadedModel | None = None) -> None:
        self.spec = spec
        self._loaded = loaded if loaded is not None else load_model(spec)
        self._lock = threading.Lock()
        self._optimizer = LoraAdamW(self._loaded.model.named_parameters())
        self._sampler = BatchSampler(
            self._loaded.model,
            self._loaded.tokenizer,
            self._loaded.eos_ids,
            self._loaded.pad_id,
            self._loaded.device,
        )
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
        return self._lock

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """A CPU copy of every trainable (LoRA) tensor, keyed by parameter name."""
        with self._lock:
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
        """Run the §1 loss over wire datums; accumulate gradients when ``backward``."""
        self._check_open()
        check_loss_fn(loss_fn)
        clip = parse_loss_config(loss_fn, loss_fn_config)
        if not datums:
            return {"metrics": {"loss": 0.0, "global_token_num": 0.0}, "lossFnOutputs": []}
        batch = parse_datums(
            datums, loss_fn, self._loaded.vocab_size, self._loaded.pad_id, self._loaded.device
        )
        grad_mode: AbstractContextManager[Any] = (
            torch.enable_grad() if backward else torch.no_grad()
        )
        with self._lock, grad_mode:
            return self._loss_step(batch, loss_fn, clip, backward)

    def forward(
        self, datums: list[dict[str, Any]], loss_fn: str, loss_fn_config: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``forward_backward(..., backward=False)``."""
        return self.forward_backward(datums, loss_fn, loss_fn_config, backward=False)

    def _loss_step(
        self, batch: Batch, loss_fn: str, clip: ClipConfig, backward: bool
    ) -> dict[str, Any]:
        out = self._loaded.model(input_ids=batch.tokens_BT, use_cache=False)
        logits_BTV = out["logits"]
        lp_BT = token_logprobs(logits_BTV, batch.targets_BT, batch.temperature_BT)
        inputs = LossInputs(
            weights=batch.weights_BT,
            sampler_logprobs=batch.logprobs_BT,
            advantages=batch.advantages_BT,
            ref_logprobs=batch.ref_log_prob_BT,
            mask=batch.mask_BT,
        )
        loss_BT, metrics = compute_loss(loss_fn, lp_BT, inputs, clip)
        total = loss_BT.sum()
        finite_or_raise(float(total.detach()), "the loss")  # before any gradient is added
        if backward:
            total.backward()
        del out, logits_BTV
        metrics["global_token_num"] = float(batch.num_tokens)
        lp_rows = lp_BT.detach().float().cpu().tolist()
        loss_rows = loss_BT.detach().float().cpu().tolist()
        outputs = [
            {
                "logprobs": _tensor_data(lp_rows[i][:n]),
                "elementwise_loss": _tensor_data(loss_rows[i][:n]),
            }
            for i, n in enumerate(batch.lengths)
        ]
        return {"metrics": metrics, "lossFnOutputs": outputs}

    def optim_step(self, adam_params: dict[str, Any]) -> dict[str, float]:
        """Apply and zero the accumulated gradients with AdamW (local-semantics §2)."""
        self._check_open()
        hp = AdamParams.from_wire(adam_params)
        with self._lock:
            return self._optimizer.step(hp)

    def zero_grad(self) -> None:
        """Drop accumulated gradients (``load_state`` does this)."""
        with self._lock:
            self._optimizer.zero_grad()

    # -- sampling -----------------------------------------------------------------------

    def _base_weights(self, weights: str | None) -> AbstractContextManager[Any]:
        if weights is not None:
            raise EngineInputError(
                f"weights {weights!r}: sampling from saved model packages is not supported "
                "by this engine yet; sample with weights=None (the base model)"
            )
        return self._loaded.model.disable_adapter()  # type: ignore[no-any-return]

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
        if problems:
            raise EngineInputError(f"{what}: " + "; ".join(problems))
        if prompt == req.prompt:
            return req
        return SampleRequest(
            prompt=prompt, num_samples=req.num_samples, max_tokens=req.max_tokens,
            temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, seed=req.seed,
            stop=req.stop, include_prompt_logprobs=req.include_prompt_logprobs,
            topk_prompt_logprobs=req.topk_prompt_logprobs,
        )

    def sample(
        self, weights: str | None, requests: list[SampleRequest]
    ) -> list[dict[str, Any]]:
        """Run several sample requests as one batch (local-semantics §3)."""
        self._check_open()
        checked = [self._check_request(i, r) for i, r in enumerate(requests)]
        if not checked:
            return []
        with self._lock, self._base_weights(weights), torch.no_grad():
            grouped = self._sampler.run(checked)
            responses: list[dict[str, Any]] = []
            for req, streams in zip(checked, grouped, strict=True):
                response: dict[str, Any] = {
                    "sequences": [
                        {"stopReason": s.stop_reason, "tokens": s.tokens, "logprobs": s.logprobs}
                        for s in streams
                    ]
                }
                topk = req.topk_prompt_logprobs or 0
                if req.include_prompt_logprobs or topk > 0:
                    values, top = prompt_logprobs(
                        self._loaded.model, req.prompt, self._loaded.device, topk
                    )
                    if req.include_prompt_logprobs:
                        response["promptLogprobs"] = values
                    if topk > 0:
                        response["topkPromptLogprobs"] = top
                responses.append(response)
        return responses

    def compute_logprobs(self, weights: str | None, tokens: list[int]) -> list[float | None]:
        """Per-token log p(tokens[i] | tokens[:i]) at T = 1; entry 0 is ``None``."""
        self._check_open()
        ids = self._check_prompt(tokens, "`prompt`")
        with self._lock, self._base_weights(weights), torch.no_grad():
            values, _ = prompt_logprobs(self._loaded.model, ids, self._loaded.device, 0)
        return [None, *values[1:]]

    # -- misc ---------------------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        """The model's ``transformers`` tokenizer."""
        return self._loaded.tokenizer

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this engine has been closed")

    def close(self) -> None:
        """Release the model and optimizer memory; later calls raise ``RuntimeError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            device = self._loaded.device
            self._optimizer.zero_grad()
            del self._sampler, self._optimizer, self._loaded
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
