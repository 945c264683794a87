"""A ChatML tokenizer and template shaped like Qwen 2.5's, for the fake engine (``fake_engine``).

Special tokens ``<|im_start|>`` (``IM_START``) and ``<|im_end|>`` (``IM_END``, also the end
of a turn the model samples) get ids of their own; every other token is one UTF-8 byte, so ids
are readable by eye. As in Qwen's template, a tool call is rendered compactly::

    <tool_call>\\n{"name": "bash", "arguments": {"command": "ls"}}\\n</tool_call>

while the fake model *samples* it pretty-printed (``sampled_text``), so in chat mode the next
prompt does not extend the last prompt and completion (the problem real servers have), and in
token mode it does by construction. Consecutive tool results share one ``user`` turn of
``<tool_response>`` blocks, as Qwen's template renders them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

IM_START, IM_END = 1000, 1001
SPECIAL = {"<|im_start|>": IM_START, "<|im_end|>": IM_END}
NAMES = {v: k for k, v in SPECIAL.items()}
_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")


def tokenize(text: str, *, parse_special: bool = True) -> list[int]:
    ids: list[int] = []
    for part in _SPLIT.split(text) if parse_special else [text]:
        if part in SPECIAL and parse_special:
            ids.append(SPECIAL[part])
        else:
            ids.extend(part.encode("utf-8"))
    return ids


def piece(token: int) -> str:
    """The text of one token (a lone byte of a multi-byte character shows as ``\\xNN``)."""
    if token in NAMES:
        return NAMES[token]
    return chr(token) if token < 0x80 else f"\\x{token:02x}"


def detokenize(ids: Sequence[int]) -> str:
    special = bytearray()
    out: list[str] = []
    for token in ids:
        if token in NAMES:
            out.append(special.decode("utf-8", errors="replace"))
            special = bytearray()
            out.append(NAMES[token])
        else:
            special.append(token)
    out.append(special.decode("utf-8", errors="replace"))
    return "".join(out)


def logprob(token: int, position: int) -> float:
    return -(((token * 31 + position * 17) % 97) + 1) / 100.0


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def rendered_call(name: str, arguments: str) -> str:
    """A tool call as the template renders it; raises ValueError for arguments that are not
    JSON (as a real template engine does when it parses them)."""
    parsed = json.loads(arguments) if arguments.strip() else {}
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": parsed}) + "\n</tool_call>"


def sampled_call(name: str, arguments: str) -> str:
    """A tool call as the fake model samples it: pretty-printed, or raw when not JSON."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}'
    body = json.dumps({"name": name, "arguments": parsed}, indent=2)
    return f"<tool_call>\n{body}\n</tool_call>"


def render(
    messages: Sequence[dict[str, Any]], tools: Sequence[Any] = (), *, generation: bool = True
) -> str:
    """The prompt text; ValueError when an assistant tool call's arguments are not JSON."""
    out: list[str] = []
    system = ""
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = _content(rest.pop(0))
    if tools or system:
        tools_text = "".join("\n" + json.dumps(t) for t in tools)
        head = system + (f"\n\n# Tools\n<tools>{tools_text}\n</tools>" if tools else "")
        out.append(f"<|im_start|>system\n{head}<|im_end|>\n")
    previous = None
    for message in rest:
        role = message.get("role")
        if role == "tool":
            if previous != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{_content(message)}\n</tool_response>")
        else:
            if previous == "tool":
                out.append("<|im_end|>\n")
            body = _content(message)
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                call_text = rendered_call(str(function.get("name")), function.get("arguments", ""))
                body += ("\n" if body else "") + call_text
            out.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
        previous = role
    if previous == "tool":
        out.append("<|im_end|>\n")
    if generation:
        out.append("<|im_start|>assistant\n")
    return "".join(out)
