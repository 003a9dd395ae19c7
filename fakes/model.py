"""The fake engine's model: a bigram logit table with a LoRA adapter, over 259 byte tokens.

``logits(prev) = base[prev] + (alpha / rank) · A[prev] @ B``: the next token depends only on
the previous one. ``base`` ([V, V]) is frozen and seeded from the session's base-model name
and seed, so equal specs give equal models in every process. The adapter is the LoRA pair:
``A`` ([V, r], seeded) and ``B`` ([r, V], zeros), so a new session samples exactly like its
base model, and LoRA+ / weight decay / clipping in the optimizer act on real LoRA matrices.
The EOS (``<|im_end|>``) column of ``base`` is raised so unscripted completions are short
(mean about 15 tokens); ``<|endoftext|>`` (padding) and ``<|im_start|>`` (BOS) are made
unlikely (but keep finite logprobs).
"""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from fakes.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE
from localsession.port import EngineSpec

BASE_STD = 1.0
EOS_BIAS = 3.0
SPECIAL_PENALTY = -8.0


def model_seed(spec: EngineSpec) -> int:
    """The seed of a spec's base table: its model name and seed together."""
    return (zlib.crc32(spec.base_model.encode("utf-8")) + 1_000_003 * spec.seed) % 2**63


class BigramLora:
    """The tables and the trainable adapter. Not thread-safe: the engine holds its lock."""

    def __init__(self, spec: EngineSpec) -> None:
        gen = torch.Generator().manual_seed(model_seed(spec))
        base = torch.randn(VOCAB_SIZE, VOCAB_SIZE, generator=gen) * BASE_STD  # [V, V]
        base[:, EOS_ID] += EOS_BIAS
        base[:, PAD_ID] += SPECIAL_PENALTY
        base[:, BOS_ID] += SPECIAL_PENALTY
        self.base_VV = base
        self.rank, self.alpha = spec.rank, spec.alpha
        self.scale = spec.alpha / spec.rank
        a = torch.randn(VOCAB_SIZE, spec.rank, generator=gen) / spec.rank**0.5  # [V, r]
        self.lora_A = torch.nn.Parameter(a)
        self.lora_B = torch.nn.Parameter(torch.zeros(spec.rank, VOCAB_SIZE))  # [r, V]

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Trainable parameters, peft-style names (``lora_B.`` marks the LoRA+ group)."""
        return [("lora_A.weight", self.lora_A), ("lora_B.weight", self.lora_B)]

    def logits(self, tokens: Tensor) -> Tensor:
        """Next-token logits after each token. [...] -> [..., V] (differentiable)."""
        return self.base_VV[tokens] + self.scale * (self.lora_A[tokens] @ self.lora_B)

    def table(self, adapter: dict[str, Tensor] | None = None) -> Tensor:
        """The whole [V, V] logit table, detached: live weights, or ``adapter``'s if given."""
        with torch.no_grad():
            if adapter is None:
                return self.base_VV + self.scale * (self.lora_A @ self.lora_B)
            return self.base_VV + self.scale * (adapter["lora_A.weight"] @ adapter["lora_B.weight"])

    def base_table(self) -> Tensor:
        """The base model's table (adapter off)."""
        return self.base_VV.clone()
