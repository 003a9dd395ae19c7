"""The fake engine's tokenizer: bytes, in pure Python (no torch, transformers or tokenizers).

It speaks exactly what the built-in models' tokenizer speaks (``localsession.chat_format``
holds the shared constants and template): 259 ids = the 256 bytes (id == byte value) plus
``<|endoftext|>`` (256, padding), ``<|im_start|>`` (257, the BOS) and ``<|im_end|>`` (258, the
EOS that ends every turn), and the Qwen chat format with tool calls. It offers the part of the
``transformers`` tokenizer interface training loops use, behaving as the real one does:

- ``encode`` / ``__call__`` prepend ``<|im_start|>`` (not with ``add_special_tokens=False``),
  and a special token spelled in the text becomes its id, as in a ``tokenizers`` tokenizer;
- ``decode`` spells specials out (a scripted completion ends ``...<|im_end|>``, as a real
  one does) and drops them with ``skip_special_tokens=True``;
- ``apply_chat_template`` renders the built-in template with jinja2 set up the way
  ``transformers`` sets it up, and returns ``{"input_ids", "attention_mask"}`` when it
  tokenizes (``return_dict=False``: the ids), as ``transformers`` 5 does;
- ``vocab_size`` is the base vocabulary (256) and ``len()`` counts the specials (259).

``tests/fakes/test_fake_tokenizer.py`` checks each of these against the real tokenizer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from localsession.chat_format import (
    BOS_ID,
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_ID,
    EOS_TOKEN,
    PAD_ID,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    VOCAB_SIZE,
    bytes_to_unicode,
)

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "SPECIAL_TOKENS", "VOCAB_SIZE", "ByteTokenizer"]

_SPECIAL_IDS = {text: token for token, text in SPECIAL_TOKENS.items()}
_SPECIAL_RE = re.compile("|".join(re.escape(text) for text in SPECIAL_TOKENS.values()))
_BYTE_CHARS = bytes_to_unicode()


class ByteTokenizer:
    """UTF-8 bytes as token ids; ``encode`` prepends ``<|im_start|>`` unless told not to."""

    vocab_size = 256
    pad_token_id, bos_token_id, eos_token_id = PAD_ID, BOS_ID, EOS_ID
    pad_token, bos_token, eos_token = PAD_TOKEN, BOS_TOKEN, EOS_TOKEN
    all_special_ids = [BOS_ID, EOS_ID, PAD_ID]
    all_special_tokens = [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN]
    chat_template = CHAT_TEMPLATE
    name_or_path = "fakes/byte-tokenizer"

    def __len__(self) -> int:
        return VOCAB_SIZE

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        """``[<|im_start|>] + utf-8 bytes``, a spelled-out special token as its id (no leading
        ``<|im_start|>`` with ``add_special_tokens=False``)."""
        ids: list[int] = [BOS_ID] if add_special_tokens else []
        at = 0
        for match in _SPECIAL_RE.finditer(text):
            ids += text[at : match.start()].encode("utf-8")
            ids.append(_SPECIAL_IDS[match.group()])
            at = match.end()
        ids += text[at:].encode("utf-8")
        return ids

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, Any]:
        ids = self.encode(text, add_special_tokens=add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False, **_: Any) -> str:
        """Bytes back to text (invalid UTF-8 replaced); specials spelled out unless skipped
        (skipped ones are dropped before the bytes are joined, as the real tokenizer does, so
        the bytes either side of one can form one character)."""
        out: list[str] = []
        run = bytearray()
        for raw in ids:
            token = int(raw)
            if 0 <= token < 256:
                run.append(token)
            elif not skip_special_tokens:
                out.append(run.decode("utf-8", errors="replace"))
                run = bytearray()
                out.append(SPECIAL_TOKENS.get(token, f"<unk:{token}>"))
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def batch_decode(
        self, batch: Iterable[Sequence[int]], skip_special_tokens: bool = False, **_: Any
    ) -> list[str]:
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Token strings as the byte-level vocabulary spells them (a space is ``Ġ``)."""
        return [_BYTE_CHARS[i] if 0 <= i < 256 else SPECIAL_TOKENS[i] for i in map(int, ids)]

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> Any:
        """The built-in models' chat format (:data:`localsession.chat_format.CHAT_TEMPLATE`):
        the text (``tokenize=False``), else ``{"input_ids", "attention_mask"}``, or the ids
        with ``return_dict=False``. ``tools`` are JSON schemas (dicts), as the runtime sends."""
        if tools is not None and not all(isinstance(tool, Mapping) for tool in tools):
            raise TypeError(
                "ByteTokenizer.apply_chat_template: give tools as JSON-schema dicts "
                "(the fakes do not derive schemas from Python functions)"
            )
        text = _template()(
            messages=list(conversation),
            tools=None if tools is None else list(tools),
            add_generation_prompt=add_generation_prompt,
            bos_token=BOS_TOKEN,
            eos_token=EOS_TOKEN,
            pad_token=PAD_TOKEN,
            **kwargs,
        )
        if not tokenize:
            return text
        encoded = self(text, add_special_tokens=False)
        return encoded if return_dict else encoded["input_ids"]


@functools.cache
def _template() -> Callable[..., str]:
    """The chat template compiled as ``transformers`` compiles one: a sandboxed jinja2
    environment (imported on first use) with ``trim_blocks``, ``lstrip_blocks``, loop controls,
    a ``tojson`` that keeps non-ASCII and HTML characters, and ``raise_exception``."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(CHAT_TEMPLATE)
    return lambda **context: str(template.render(**context))
