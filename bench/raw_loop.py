"""The hand-written baseline every training benchmark compares against: plain torch + peft.

A base model loaded the way a user loads it (``localsession/*`` names are built from their
config, any other name through transformers), peft LoRA on every linear layer (rank 32,
alpha 64, no dropout), a summed next-token cross-entropy, ``backward`` and
``torch.optim.AdamW(fused=True)`` (``foreach`` where no fused kernel exists). Nothing here goes
through localsession's engine, so the baseline stays independent of the code it measures.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

RANK, ALPHA = 32, 64
LEARNING_RATE = 1e-4
WEIGHT_DECAY = 0.01  # the SDK's AdamParams default, so both loops apply the same update


def load_plain(name: str, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """The base model (weights in ``dtype``) and tokenizer the way a user loads them (no
    localsession engine)."""
    from localsession.engine.builtin import build_builtin

    if name.startswith("localsession/"):
        model, tokenizer = build_builtin(name)
        return model.to(dtype), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model, AutoTokenizer.from_pretrained(name)


class RawLoop:
    """peft LoRA + summed cross-entropy + fused AdamW on ``name``'s base model.

    ``dtype`` is the base weights' dtype; peft keeps the adapter (and so its gradients and
    the AdamW moments) in float32 over a half-precision base, and the loss is taken on
    float32 logits."""

    def __init__(self, name: str, dtype: torch.dtype = torch.float32) -> None:
        from peft import LoraConfig, get_peft_model

        base, self.tokenizer = load_plain(name, dtype)
        base.requires_grad_(False)
        config = LoraConfig(
            r=RANK,
            lora_alpha=ALPHA,
            target_modules="all-linear",
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.model = get_peft_model(base, config)
        params = [p for p in self.model.parameters() if p.requires_grad]
        try:
            self.optimizer = torch.optim.AdamW(
                params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, fused=True
            )
        except (RuntimeError, ValueError, TypeError):  # no fused kernel on this device
            self.optimizer = torch.optim.AdamW(
                params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, foreach=True
            )

    def forward_backward(self, rows: list[list[int]]) -> float:
        """Summed next-token cross-entropy over ``rows``; gradients accumulate. Returns the
        loss."""
        ids_BT = torch.tensor(rows)
        logits_BTV = self.model(input_ids=ids_BT[:, :-1], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(
            logits_BTV.float().flatten(0, 1), ids_BT[:, 1:].flatten(), reduction="sum"
        )
        del logits_BTV  # a large vocabulary's logits: not held through backward
        loss.backward()
        return float(loss.detach())

    def optim_step(self) -> None:
        """Apply and drop the accumulated gradients."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, rows: list[list[int]]) -> float:
        """One training step; returns the loss."""
        loss = self.forward_backward(rows)
        self.optim_step()
        return loss

    @torch.no_grad()
    def logprobs(self, rows: list[list[int]]) -> torch.Tensor:
        """Each next token's log-probability, [B, T-1]."""
        ids_BT = torch.tensor(rows)
        logits_BTV = self.model(input_ids=ids_BT, use_cache=False).logits
        return (
            torch.log_softmax(logits_BTV[:, :-1].float(), -1)
            .gather(-1, ids_BT[:, 1:].unsqueeze(-1))
            .squeeze(-1)
        )


def batched_generate(
    model: Any, prompts: list[list[int]], pad: int, eos: int, max_tokens: int, samples: int
) -> Callable[[], int]:
    """The raw sampling baseline: one ``generate`` call over every prompt (left-padded with
    ``pad``), ``samples`` sequences each, full-vocabulary sampling at temperature 1. The
    returned callable runs it once and returns the tokens generated: up to and including
    each sequence's first ``eos`` (generate pads the rest), else all of them."""
    width = max(len(p) for p in prompts)
    ids_BL = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask_BL = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])

    def run() -> int:
        with torch.no_grad():
            out_NL = model.generate(
                input_ids=ids_BL,
                attention_mask=mask_BL,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_tokens,
                num_return_sequences=samples,
                pad_token_id=pad,
            )
        is_eos_NL = out_NL[:, width:] == eos
        first_N = torch.where(is_eos_NL.any(-1), is_eos_NL.int().argmax(-1) + 1, is_eos_NL.shape[1])
        return int(first_N.sum())

    return run
