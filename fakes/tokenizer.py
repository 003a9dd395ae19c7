"""The fake engine's tokenizer: bytes, in pure Python (no ``transformers``, no ``tokenizers``).

Same vocabulary as localsession's built-in models: 259 ids = the 256 bytes (id == byte value)
plus ``<pad>`` (256), ``<bos>`` (257) and ``<eos>`` (258). It offers the part of the
``transformers`` tokenizer interface training loops use: ``encode``, ``decode``,
``batch_decode``, ``__call__``, ``apply_chat_template``, the special-token attributes and
``vocab_size`` / ``len()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PAD_ID, BOS_ID, EOS_ID = 256, 257, 258
VOCAB_SIZE = 259
SPECIAL_TOKENS = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


class ByteTokenizer:
    """UTF-8 bytes as token ids; ``encode`` prepends ``<bos>`` unless told not to."""

    vocab_size = VOCAB_SIZE
    pad_token_id, bos_token_id, eos_token_id = PAD_ID, BOS_ID, EOS_ID
    pad_token, bos_token, eos_token = "<pad>", "<bos>", "<eos>"
    all_special_ids = [PAD_ID, BOS_ID, EOS_ID]
    name_or_path = "fakes/byte-tokenizer"

    def __len__(self) -> int:
        return VOCAB_SIZE

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        """``[<bos>] + utf-8 bytes`` (no ``<bos>`` with ``add_special_tokens=False``)."""
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_special_tokens else ids

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, Any]:
        ids = self.encode(text, add_special_tokens=add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False, **_: Any) -> str:
        """Bytes back to text (invalid UTF-8 replaced); specials spelled out unless skipped."""
        out: list[str] = []
        run = bytearray()
        for raw in ids:
            token = int(raw)
            if 0 <= token < 256:
                run.append(token)
                continue
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            if not skip_special_tokens:
                out.append(SPECIAL_TOKENS.get(token, f"<unk:{token}>"))
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def batch_decode(
        self, batch: Iterable[Sequence[int]], skip_special_tokens: bool = False, **_: Any
    ) -> list[str]:
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.decode([i]) for i in ids]

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, str]],
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **_: Any,
    ) -> Any:
        """The built-in models' chat format: ``<bos><|role|>\\ncontent<eos>\\n`` per message."""
        ids = [BOS_ID]
        for message in messages:
            ids += self.encode(f"<|{message['role']}|>\n{message['content']}", False)
            ids += [EOS_ID, *b"\n"]
        if add_generation_prompt:
            ids += self.encode("<|assistant|>\n", False)
        return ids if tokenize else self.decode(ids)
