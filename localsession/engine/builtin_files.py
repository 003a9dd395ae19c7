"""The built-in models' shapes, byte-level tokenizer and exported files, without torch.

``localsession.mock(engine="fake")`` and the fakes run on the built-in tokenizer and never
load a model, so the Hub's tokenizer export for a built-in must not import torch or
transformers (importing them costs seconds). This module builds the tokenizer with the
``tokenizers`` library only and writes the four files ``AutoTokenizer.from_pretrained``
reads: ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja`` and the model's
``config.json``. They are the files transformers' ``save_pretrained`` writes for the same
tokenizer and ``LlamaConfig`` (checked file by file in ``tests/engine/test_builtin.py``).
``localsession.engine.builtin`` builds the models on top of this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from localsession.chat_format import (
    BOS_ID,
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_ID,
    EOS_TOKEN,
    MAX_POSITIONS,
    PAD_ID,
    PAD_TOKEN,
    THINK_TOKENS,
    VOCAB_SIZE,
    bytes_to_unicode,
)

__all__ = [
    "BUILTIN_SHAPES",
    "BuiltinShape",
    "byte_tokenizer",
    "config_dict",
    "vocab_size",
    "write_files",
]


@dataclass(frozen=True)
class BuiltinShape:
    """Architecture sizes of one built-in model."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    #: ``<think>`` / ``</think>`` are single tokens (ids 259, 260; chat_format.THINK_TOKENS)
    think: bool = False


BUILTIN_SHAPES: dict[str, BuiltinShape] = {
    "localsession/tiny": BuiltinShape(hidden=128, intermediate=512, layers=2, heads=4, kv_heads=4),
    "localsession/small": BuiltinShape(
        hidden=256, intermediate=1024, layers=4, heads=8, kv_heads=4
    ),
    # tiny's shape with the think tokens: an offline stand-in for the Qwen3.5 family, whose
    # renderers (tinker-cookbook) need <think> and </think> as single tokens
    "localsession/tiny-think": BuiltinShape(
        hidden=128, intermediate=512, layers=2, heads=4, kv_heads=4, think=True
    ),
}


def shape_of(name: str) -> BuiltinShape:
    """The shape of built-in ``name``; ``ValueError`` listing the built-ins if unknown."""
    try:
        return BUILTIN_SHAPES[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_SHAPES))
        raise ValueError(f"unknown built-in model {name!r}; built-ins are: {known}") from None


def vocab_size(name: str) -> int:
    """Built-in ``name``'s vocabulary: 259, plus the two think tokens where it has them."""
    return VOCAB_SIZE + (len(THINK_TOKENS) if shape_of(name).think else 0)


def byte_tokenizer(think: bool = False) -> Tokenizer:
    """The byte-level tokenizer (token id == byte value, three specials, BOS prepended);
    ``think``: with ``<think>`` / ``</think>`` as ordinary single tokens 259 and 260."""
    byte_chars = bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    # BPE with no merges: every pre-tokenized symbol (one byte) maps straight to its id.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([PAD_TOKEN, BOS_TOKEN, EOS_TOKEN])
    if think:  # ids follow the specials; not special, so decoding keeps them
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    return tok


def config_dict(name: str) -> dict[str, Any]:
    """The ``config.json`` of built-in ``name``: a Llama config with its shape."""
    shape = shape_of(name)
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": shape.hidden // shape.heads,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "pad_token_id": PAD_ID,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab_size(name),
    }


def write_files(target: str, directory: Path) -> None:
    """Write built-in ``target``'s tokenizer and config files into ``directory``."""
    config = config_dict(target)
    directory.mkdir(parents=True, exist_ok=True)
    byte_tokenizer(shape_of(target).think).save(str(directory / "tokenizer.json"))
    tokenizer_config = {
        "backend": "tokenizers",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "model_max_length": MAX_POSITIONS,
        "pad_token": PAD_TOKEN,
        "tokenizer_class": "TokenizersBackend",
    }
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8"
    )
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
