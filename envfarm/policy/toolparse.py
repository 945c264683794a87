"""Tool calls parsed out of sampled text (token mode, where no server parses them).

Formats, tried in this order by ``auto``:

- ``hermes`` (Hermes, Qwen 2.5/3): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  any number of them;
- ``fenced``: a fenced code block (```json or bare ```) holding such an object;
- ``llama`` (Llama 3.1+ JSON tool calling): the whole reply is one object with ``name`` and
  ``parameters`` (or ``arguments``), optionally after ``<|python_tag|>``.

A call that cannot be read whole (cut at ``max_tokens``, bad JSON) still becomes a call: its
name if one can be found, and ``arguments`` the raw text as sampled, which the agent then
counts as malformed and answers with an error. The text outside the calls is the content.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from envfarm.policy.base import ToolCallRaw

ToolParser = Literal["auto", "hermes", "fenced", "llama"]
TOOL_PARSERS: tuple[str, ...] = ("auto", "hermes", "fenced", "llama")

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCED = re.compile(r"```(?:json|tool_call)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"\\]*)"')
_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*', re.DOTALL)
UNREADABLE = "unreadable_tool_call"
"""The name of a call whose name could not be read (the agent answers it as unknown)."""


def parse_tool_calls(
    text: str, parser: ToolParser = "auto", *, prefix: str = "call"
) -> tuple[str | None, list[ToolCallRaw]]:
    """The content and the tool calls of a sampled ``text``."""
    order: list[ToolParser] = ["hermes", "fenced", "llama"] if parser == "auto" else [parser]
    for name in order:
        found = _PARSERS[name](text, prefix)
        if found is not None:
            return found
    return (text or None), []


def _call(body: str, prefix: str, index: int) -> ToolCallRaw:
    call_id = f"{prefix}_{index}"
    try:
        value, _ = json.JSONDecoder().raw_decode(body.strip())
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        arguments = value.get("arguments", value.get("parameters", {}))
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return ToolCallRaw(id=call_id, name=value["name"], arguments=raw)
    named = _NAME.search(body)
    start = _ARGUMENTS.search(body)
    raw = body[start.end() :] if start else body
    if start:
        raw = raw.rstrip().removesuffix("}").rstrip() if raw.rstrip().endswith("}}") else raw
    return ToolCallRaw(id=call_id, name=named.group(1) if named else UNREADABLE, arguments=raw)


def _blocks(
    pattern: re.Pattern[str], text: str, prefix: str
) -> tuple[str | None, list[ToolCallRaw]] | None:
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    calls = [_call(m.group(1), prefix, i) for i, m in enumerate(matches)]
    content = pattern.sub("", text).strip()
    return (content or None), calls


def _hermes(text: str, prefix: str) -> tuple[str | None, list[ToolCallRaw]] | None:
    return _blocks(_HERMES, text, prefix)


def _fenced(text: str, prefix: str) -> tuple[str | None, list[ToolCallRaw]] | None:
    found = _blocks(_FENCED, text, prefix)
    if found is None or not any(c.name != UNREADABLE for c in found[1]):
        return None
    return found


def _llama(text: str, prefix: str) -> tuple[str | None, list[ToolCallRaw]] | None:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return None
    value: Any
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if value is not None and not (isinstance(value, dict) and "name" in value):
        return None
    if value is None and not _NAME.search(body):
        return None
    return None, [_call(body, prefix, 0)]


_PARSERS = {"hermes": _hermes, "fenced": _fenced, "llama": _llama}
