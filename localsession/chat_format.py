"""The built-in models' byte vocabulary, special tokens and chat format, with no torch.

One torch-free place for what two tokenizers must agree on: the built-in models' real
tokenizer (``localsession.engine.builtin.build_tokenizer``, a ``tokenizers`` BPE) and the
fakes' pure-Python ``fakes.ByteTokenizer``. Ids 0-255 are the bytes (token id == byte value);
the three specials are named as in the Qwen chat family: ``<|endoftext|>`` (256, padding),
``<|im_start|>`` (257, also the BOS) and ``<|im_end|>`` (258, the EOS that ends every turn).
"""

from __future__ import annotations

PAD_ID = 256
BOS_ID = 257
EOS_ID = 258
VOCAB_SIZE = 259
#: The built-in models' context length: that of the models they commonly stand in for
#: (``openai/gpt-oss-20b`` and most current chat models take 128k = 131,072 positions), so
#: code written for those runs unchanged. RoPE has no per-position weights or tables: a
#: longer context costs nothing until a request uses it.
MAX_POSITIONS = 131072

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
#: The reasoning markers of the Qwen3 / Qwen3.5 family. Only the built-in ``localsession/
#: tiny-think`` has them, as single ordinary (not special) tokens after the specials: 259 and
#: 260, so its vocabulary is 261 and a decoded reply keeps them, as Qwen's does.
THINK_TOKENS = ("<think>", "</think>")
#: Special token id -> its text, in id order.
SPECIAL_TOKENS: dict[int, str] = {PAD_ID: PAD_TOKEN, BOS_ID: BOS_TOKEN, EOS_ID: EOS_TOKEN}

#: The Qwen chat format with tool calls (the layout of Qwen2.5/Qwen3's own template, worded
#: here afresh): a system turn only when one is given or ``tools`` are offered.
CHAT_TEMPLATE = (
    "{%- set has_system = messages and messages[0]['role'] == 'system' %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if has_system %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nCall a function when it helps to answer. The functions you may call "
    "are listed as JSON signatures inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call one, reply with a JSON object holding the function name "
    "and its arguments inside <tool_call></tool_call> tags, one block per call:\\n"
    '<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n'
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif has_system %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] or [] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}"
    "{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character map (what ByteLevel pre-tokenizes to)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(code) for byte, code in zip(printable, chars, strict=True)}
