"""The built-in tiny models: ``localsession/tiny`` and ``localsession/small``.

They exist so that everything (tests, examples, CI) runs offline on a CPU in seconds. Each is
a Llama-architecture ``transformers`` model with deterministic seeded weights (the same in
every process and on every machine, independent of ``transformers``' own initialisers) and a
byte-level tokenizer built locally with the ``tokenizers`` library:

- vocabulary 259 = the 256 bytes (token id == byte value) + three special tokens named as in
  the Qwen chat family: ``<|endoftext|>`` (256, padding), ``<|im_start|>`` (257, also the
  BOS) and ``<|im_end|>`` (258, the EOS that ends every turn);
- ``encode(text)`` prepends ``<|im_start|>``; ``decode(encode(s), skip_special_tokens=True)
  == s`` for any unicode string that does not spell a special token literally;
- the Qwen chat format (:data:`CHAT_TEMPLATE`) with tool calling: ``<|im_start|>role\n...
  <|im_end|>\n`` turns, a ``<tools>`` block of JSON signatures in the system turn when
  ``tools`` are given, ``<tool_call>`` JSON blocks in assistant turns, and tool results as
  ``<tool_response>`` blocks in a user turn. Special tokens are real special tokens, so
  ``skip_special_tokens=True`` drops them from any reply.

``save_builtin`` writes model and tokenizer with ``save_pretrained`` so the "local directory"
and "HF cache" loading paths can be exercised without any download.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from localsession.chat_format import (
    BOS_ID,
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_ID,
    EOS_TOKEN,
    MAX_POSITIONS,
    PAD_ID,
    PAD_TOKEN,
    VOCAB_SIZE,
)
from localsession.engine.builtin_files import (
    BUILTIN_SHAPES,
    byte_tokenizer,
    shape_of,
    vocab_size,
)

__all__ = [
    "BOS_ID",
    "BOS_TOKEN",
    "BUILTIN_SHAPES",
    "CHAT_TEMPLATE",
    "EOS_ID",
    "EOS_TOKEN",
    "MAX_POSITIONS",
    "PAD_ID",
    "PAD_TOKEN",
    "VOCAB_SIZE",
    "build_builtin",
    "build_tokenizer",
    "builtin_config",
    "describe_builtin",
    "save_builtin",
]


#: Standard deviation of the token embedding. Every other matrix is N(0, 1/fan_in): with
#: RMSNorm fixing the hidden norm at ~sqrt(hidden), that keeps logits at unit scale. (With
#: N(0, 0.02) everywhere the frozen output head caps every logit near 2.5, and LoRA can then
#: never push the loss below ~3 nats/token.)
INIT_STD = 0.02


def builtin_config(name: str) -> LlamaConfig:
    """The ``LlamaConfig`` of built-in model ``name``."""
    shape = shape_of(name)
    return LlamaConfig(
        vocab_size=vocab_size(name),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=False,
    )


def build_tokenizer(name: str = "", builtin: str | None = None) -> PreTrainedTokenizerFast:
    """The byte-level tokenizer shared by all built-in models (token id == byte value);
    ``name`` becomes its ``name_or_path`` (the model id it serves). ``builtin`` (default
    ``name``) is the built-in it is for: ``localsession/tiny-think``'s has the think tokens."""
    which = builtin if builtin is not None else name
    tok = byte_tokenizer(which in BUILTIN_SHAPES and BUILTIN_SHAPES[which].think)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=MAX_POSITIONS,
        name_or_path=name,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def _seed_for(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


@torch.no_grad()
def _init_weights(model: LlamaForCausalLM, seed: int) -> None:
    """Overwrite every parameter from a private generator, in sorted-name order.

    RMSNorm weights are 1, the embedding is N(0, INIT_STD), every other matrix N(0, 1/fan_in).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for pname, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        if param.dim() == 1:  # RMSNorm weights
            param.fill_(1.0)
        else:
            std = INIT_STD if "embed_tokens" in pname else param.shape[1] ** -0.5
            values = torch.empty(param.shape, dtype=torch.float32)
            values.normal_(0.0, std, generator=gen)
            param.copy_(values)


def build_builtin(name: str) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Build built-in model ``name`` (float32, CPU, eval mode) and its tokenizer.

    The weights depend only on ``name``: every call in every process returns the same model.
    The global torch RNG is left untouched.
    """
    config = builtin_config(name)
    with torch.random.fork_rng(devices=[]):
        model = LlamaForCausalLM(config)
    _init_weights(model, _seed_for(name))
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.bos_token_id = BOS_ID
    model.generation_config.eos_token_id = EOS_ID
    model.eval()
    return model, build_tokenizer(name, name)


def save_builtin(name: str, directory: str | Path) -> Path:
    """Write built-in model ``name`` and its tokenizer to ``directory`` with ``save_pretrained``.

    The result loads with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model, tokenizer = build_builtin(name)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def describe_builtin(name: str) -> dict[str, Any]:
    """A small summary (parameter count and sizes) for CLIs and error messages."""
    shape = shape_of(name)
    config = builtin_config(name)
    h, i, n = shape.hidden, shape.intermediate, shape.layers
    head_dim = h // shape.heads
    attn = 2 * h * h + 2 * h * head_dim * shape.kv_heads
    per_layer = attn + 3 * h * i + 2 * h
    params = 2 * config.vocab_size * h + n * per_layer + h
    return {"name": name, "parameters": params, "hidden": h, "layers": n}
