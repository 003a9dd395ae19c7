"""Target log-probabilities from the last hidden states, the output head's logits made once
and consumed in place a few positions at a time.

The plain path (``model(...)["logits"]`` then ``numerics.losses.token_logprobs``) keeps three
vocabulary-wide tensors per position: the logits, cross-entropy's saved log-softmax and, in
the backward, its gradient; each is a full pass over memory. On SmolLM2-135M at 8×256 those
are 400 MB each, and the log-softmax's two passes cost about as much as a tenth of the step's
matmuls. :class:`_HeadLogprobs` computes the logits with one product, then, chunk by chunk
of positions (a chunk fits the CPU's cache), divides by the temperature, takes the
log-sum-exp and turns the chunk into probabilities in place; the backward turns those into
the logits' gradient in place, ``-p·Σg + g`` at each picked (position, token), and makes one
product with the head's weight. Same formulas as the plain path, so values and gradients
agree to float rounding (tests/engine/test_head_logprobs.py), and one vocabulary-wide tensor
lives instead of three.

It applies where the model's logits are exactly ``hidden @ head.weight.T``
(:func:`split_head`): a model type of :data:`PLAIN_HEADS`, a frozen head without a bias, a
LoRA-wrapped head (``train_unembed``) or hooks on it (a disk-offloaded base) excluded, and not
while ``torch.compile`` runs the training forward. Anything else runs the plain path.
``LOCALSESSION_FUSED_HEAD=off`` (``EngineOptions.fused_head``) turns it off for every model
an engine loads: :func:`mark` records the choice on the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from localsession.engine.compiled import TrainingForward
from localsession.engine.fast_linear import FastLinear, linear
from localsession.numerics.losses import token_logprobs

#: The attribute :func:`mark` sets on a model: whether its fused head may be used.
_FUSED_MARK = "_localsession_fused_head"
#: Model types whose causal-LM logits are the head's plain product with the last hidden
#: states (no soft-capping, logit scale or split head).
PLAIN_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "phi3"})
#: Float32 bytes of one in-place chunk: a CPU's cache holds it; an accelerator takes bigger.
CHUNK_BYTES = {"cpu": 2 * 2**20}
DEVICE_CHUNK_BYTES = 256 * 2**20

Body = Callable[..., torch.Tensor]


def mark(model: Any, fused: bool) -> None:
    """Record on ``model`` (a peft or plain causal LM) whether :func:`split_head` may fuse
    its head (``EngineOptions.fused_head``); an unmarked model may."""
    object.__setattr__(model, _FUSED_MARK, fused)


def marked(model: Any) -> bool:
    """The choice :func:`mark` recorded on ``model`` (default: fused)."""
    return bool(vars(model).get(_FUSED_MARK, True))


def split_head(model: Any) -> tuple[Body, torch.Tensor] | None:
    """``(body, weight)`` with ``model(**inputs)["logits"] == body(**inputs) @ weight.T`` for
    ``model`` (a peft model, a plain causal LM, or the engine's ``TrainingForward``); ``None``
    where that does not hold or cannot be shown (module docstring)."""
    if isinstance(model, TrainingForward):
        if model.is_compiled:
            return None
        model = model.model
    if not marked(model):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEADS:
        return None
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return None
    head = base.get_output_embeddings()
    if type(head) not in (torch.nn.Linear, FastLinear) or head.bias is not None:
        return None
    if head.weight.requires_grad or hasattr(head, "_hf_hook") or head._forward_hooks:
        return None
    decoder = base.get_decoder()

    def body(**inputs: Any) -> torch.Tensor:
        return decoder(**inputs).last_hidden_state  # type: ignore[no-any-return]

    return body, head.weight


def target_logprobs(
    model: Any,
    inputs: dict[str, Any],
    tok_M: torch.Tensor,
    tau_N: torch.Tensor | None,
    pos_M: torch.Tensor | None = None,
) -> torch.Tensor:
    """log softmax(logits[pos] / tau[pos])[tok] for each pick, in float32. -> ``[M]``.

    ``model(**inputs)`` gives logits ``[R, L, V]``, flattened here to ``N = R·L`` positions;
    ``pos_M`` indexes those positions (``None``: every position once, in order, so ``M = N``),
    ``tok_M`` the vocabulary; ``tau_N`` (optional, > 0) is each position's temperature.
    Through :class:`_HeadLogprobs` where :func:`split_head` allows, else the plain path."""
    split = split_head(model)
    if split is None:
        logits_RLV = model(**inputs, use_cache=False)["logits"]
        if split_head(model) is not None:  # a compiled forward failed and runs eager now:
            del logits_RLV  # this call too, as every later one will (the same rounding)
            return target_logprobs(model, inputs, tok_M, tau_N, pos_M)
        logits_NV = logits_RLV.reshape(-1, logits_RLV.shape[-1])
        del logits_RLV
        if pos_M is None:  # torch's fused cross-entropy: its backward holds one tensor less
            return token_logprobs(logits_NV, tok_M, tau_N)
        logits_NV = logits_NV.float()
        if tau_N is not None:
            logits_NV = logits_NV / tau_N.to(torch.float32).unsqueeze(-1)
        return logits_NV[pos_M, tok_M] - torch.logsumexp(logits_NV, dim=-1)[pos_M]
    body, weight_VH = split
    hidden_RLH = body(**inputs, use_cache=False)
    hidden_NH = hidden_RLH.reshape(-1, hidden_RLH.shape[-1])
    if pos_M is None:
        pos_M = torch.arange(hidden_NH.shape[0], device=hidden_NH.device)
    return _HeadLogprobs.apply(hidden_NH, weight_VH, pos_M, tok_M, tau_N)  # type: ignore[no-any-return]


def _chunk_rows(vocab: int, device: torch.device) -> int:
    """Positions per in-place chunk."""
    return max(1, CHUNK_BYTES.get(device.type, DEVICE_CHUNK_BYTES) // (4 * vocab))


class _HeadLogprobs(torch.autograd.Function):
    """``log softmax(h @ W.T / tau)[pos, tok]`` with the probabilities kept for the backward
    (module docstring). The weight gets no gradient (:func:`split_head` admits frozen heads
    only); the backward consumes what the forward kept, so it runs once."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden_NH: torch.Tensor,
        weight_VH: torch.Tensor,
        pos_M: torch.Tensor,
        tok_M: torch.Tensor,
        tau_N: torch.Tensor | None,
    ) -> torch.Tensor:
        probs_NV = linear(hidden_NH, weight_VH).float()  # the logits, then in place below
        vocab = probs_NV.shape[1]
        picked_M = probs_NV.view(-1)[pos_M * vocab + tok_M]  # raw logits at the picks
        tau_N = None if tau_N is None else tau_N.to(torch.float32)
        if tau_N is not None:
            picked_M = picked_M / tau_N[pos_M]
        lse_N = torch.empty(probs_NV.shape[0], dtype=torch.float32, device=probs_NV.device)
        keep = ctx.needs_input_grad[0]
        step = _chunk_rows(vocab, probs_NV.device)
        for start in range(0, probs_NV.shape[0], step):
            chunk_CV = probs_NV[start : start + step]
            if tau_N is not None:
                chunk_CV.div_(tau_N[start : start + step].unsqueeze(-1))
            lse_C1 = torch.logsumexp(chunk_CV, dim=-1, keepdim=True)
            lse_N[start : start + step] = lse_C1.squeeze(-1)
            if keep:
                chunk_CV.sub_(lse_C1).exp_()  # softmax probabilities
        if keep:
            ctx.save_for_backward(probs_NV, weight_VH, pos_M, tok_M, tau_N)
            ctx.hidden_dtype = hidden_NH.dtype
            ctx.spent = False
        return picked_M - lse_N[pos_M]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_M: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if ctx.spent:
            raise RuntimeError("the fused head's backward runs once (its probabilities are spent)")
        ctx.spent = True
        probs_NV, weight_VH, pos_M, tok_M, tau_N = ctx.saved_tensors
        rows, vocab = probs_NV.shape
        grad_M = grad_M.to(torch.float32)
        # d lp / d z = onehot(tok) - p at the pick's position; z = logits / tau
        sum_N = torch.zeros(rows, dtype=torch.float32, device=probs_NV.device)
        sum_N.index_add_(0, pos_M, grad_M)
        scale_N = -sum_N if tau_N is None else -sum_N / tau_N
        step = _chunk_rows(vocab, probs_NV.device)
        for start in range(0, rows, step):
            probs_NV[start : start + step].mul_(scale_N[start : start + step].unsqueeze(-1))
        add_M = grad_M if tau_N is None else grad_M / tau_N[pos_M]
        probs_NV.view(-1).index_add_(0, pos_M * vocab + tok_M, add_M)  # now d loss / d logits
        grad_NV = probs_NV.to(ctx.hidden_dtype)
        del probs_NV
        grad_NH = linear(grad_NV, weight_VH.T)  # [N, V] @ [V, H]
        return grad_NH, None, None, None, None


def row_logprobs(
    model: Any, tokens_BT: torch.Tensor, targets_BT: torch.Tensor, tau_BT: torch.Tensor | None
) -> torch.Tensor:
    """log softmax(logits / temperature)[target] at every position of right-padded rows
    (causal attention, no mask), in float32: :func:`target_logprobs` of ``model`` over
    ``tokens_BT``. -> ``[B, T]``."""
    tau_N = None if tau_BT is None else tau_BT.reshape(-1)
    inputs = {"input_ids": tokens_BT}
    return target_logprobs(model, inputs, targets_BT.reshape(-1), tau_N).view(targets_BT.shape)
