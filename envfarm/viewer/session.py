"""The whole session of a trajectory, turn by turn, from its messages and turns.

``messages`` holds the last context segment; each earlier segment's messages are the
``prior_messages`` of the segment that replaced it (docs/trajectory.md). Within a segment the
n-th assistant message is the n-th turn of that segment; the tool results and any user message
that follow it belong to that turn. Messages before the first assistant message (the system
prompt, the instruction or the summary) open the segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TurnView:
    turn: dict[str, Any] | None
    """The turn record; None for an assistant message no turn accounts for."""
    message: dict[str, Any] | None = None
    after: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SegmentView:
    index: int
    opening: list[dict[str, Any]]
    turns: list[TurnView]
    record: dict[str, Any] | None
    """The ``segments[]`` entry that started this segment (None for segment 0)."""


def session(document: dict[str, Any]) -> list[SegmentView]:
    turns: list[dict[str, Any]] = [t for t in document.get("turns") or [] if isinstance(t, dict)]
    records = {
        int(s.get("index", 0)): s for s in document.get("segments") or [] if isinstance(s, dict)
    }
    last = max([0, *records, *(int(t.get("segment") or 0) for t in turns)])
    views = []
    for index in range(last + 1):
        if index == last:
            messages = document.get("messages") or []
        else:
            messages = (records.get(index + 1) or {}).get("prior_messages") or []
        own = [t for t in turns if int(t.get("segment") or 0) == index]
        views.append(_segment(index, messages, own, records.get(index)))
    return views


def _segment(
    index: int, messages: list[Any], turns: list[dict[str, Any]], record: dict[str, Any] | None
) -> SegmentView:
    opening: list[dict[str, Any]] = []
    views: list[TurnView] = []
    pending = iter(turns)
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            views.append(TurnView(next(pending, None), message))
        elif views:
            views[-1].after.append(message)
        else:
            opening.append(message)
    views.extend(TurnView(turn) for turn in pending)  # turns whose messages were not kept
    return SegmentView(index, opening, views, record)


def message_text(message: dict[str, Any]) -> str:
    """The text of a message's content (a string, or the text parts of a list)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def reasoning_text(message: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning", "thinking"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""
