"""Tool calling in chat completions: checking OpenAI's ``tools``, ``tool_choice`` and an
assistant message's ``tool_calls``, and reading ``<tool_call>`` blocks back out of a reply.

The blocks are the Qwen/SmolLM convention the built-in chat template teaches:
``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``. Arguments arrive from
OpenAI clients as JSON strings and are parsed into objects for the template (which renders
them as JSON again); replies carry them back as JSON strings, as OpenAI does.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from localsession.runtime import errors

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, checked: ``function.name`` and JSON
    ``function.arguments`` (a string, as OpenAI sends it, is parsed for the template)."""
    if not isinstance(value, list):
        raise errors.validation(f"{where} must be a list of tool calls")
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise errors.validation(f"{where}[{j}].function.name must be a non-empty string")
        arguments = fn.get("arguments", {}) if isinstance(fn, dict) else {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                raise errors.validation(
                    f"{where}[{j}].function.arguments is not valid JSON: {arguments[:200]!r}"
                ) from None
        calls.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    return calls


def parse_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The ``tools`` the template is shown, after ``tool_choice``; None for none."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise errors.validation(
            f"'tool_choice' {choice!r} is not served: sampling cannot force a call; "
            "use 'auto' (the model decides) or 'none'"
        )
    if not isinstance(body.get("parallel_tool_calls", True), bool):
        raise errors.validation("'parallel_tool_calls' must be true or false")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise errors.validation("'tools' must be a list of {type: 'function', function: {...}}")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise errors.validation(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                "'parameters': {...}}}"
            )
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise errors.validation(f"tools[{i}].function.name must be a non-empty string")
    return None if choice == "none" or not tools else list(tools)


def split_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a reply: each ``<tool_call>`` block holding a JSON object
    with a ``name`` becomes an OpenAI tool call (``arguments`` as a JSON string); blocks that
    do not parse stay in the content."""
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return match.group(0)
        arguments = call.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments
                    if isinstance(arguments, str)
                    else json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        return ""

    content = _TOOL_CALL_RE.sub(take, text)
    return (content.strip() if calls else content), calls
