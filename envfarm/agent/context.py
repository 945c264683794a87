"""The context budget: how big the next prompt is, and what the agent says when it is too big.

Self-summarization. Before each model call the agent sizes the prompt it is about to send; when
it would exceed the budget, the model is asked to summarize its work instead (the summary
request keeps the tools in the prompt and sends ``tool_choice: "none"``, so its prompt extends
the context the model has seen), and the next segment starts from the system prompt and the
instruction followed by that summary.

Sizing the next prompt. The last model call's prompt and completion as the server counted them
(the lengths of the token ids it returned, else ``usage.prompt_tokens + completion_tokens``),
plus an estimate of what was appended since (tool results, nudges): ``CHARS_PER_TOKEN``
characters per token and ``TOKENS_PER_MESSAGE`` per message for the chat template. Without a
server count (a text-only server that reports no usage) the whole context is estimated that
way, tools included. Character counts are kept as running sums, so sizing costs only the
messages appended since the last call, however long the session.
"""

from __future__ import annotations

import json
import math
from typing import Any

from envfarm.policy.base import Completion

CHARS_PER_TOKEN = 3.0
"""A deliberately low figure (English prose and code run 3.5 to 4.5 with BPE tokenizers), so
that estimates err on the large side."""
TOKENS_PER_MESSAGE = 8
"""The chat template's tokens around each message (role markers, separators)."""

SUMMARY_REQUEST = """\
Your context is almost full. Summarize your work on this task so far, for your own use: what \
you have done and found, the current state of the files and the environment, what remains to \
do and how you plan to do it. Your context will then be reset to the task instruction followed \
by this summary, so include every detail you need to continue (paths, commands, errors, \
decisions). Reply with the summary only; do not call tools."""

RESUMED = """{instruction}

---

You have already worked on this task, and your context was reset to save space. Here is your \
summary of the work so far:

{summary}

Continue from there."""


def resumed_instruction(instruction: str, summary: str) -> str:
    """The user message a new segment starts with: the instruction, then the summary (one
    message, since some chat templates refuse two user messages in a row)."""
    return RESUMED.format(instruction=instruction.rstrip("\n"), summary=summary.strip())


def message_chars(message: dict[str, Any]) -> int:
    """Characters of a message's content and tool calls (what the template renders)."""
    content = message.get("content")
    if isinstance(content, list):
        chars = sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    else:
        chars = len(content) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        chars += len(str(function.get("name", ""))) + len(str(function.get("arguments", "")))
    return chars


def server_count(completion: Completion) -> int | None:
    """Prompt plus completion tokens of a model call as the server counted them, or None."""
    tokens = completion.tokens
    if tokens is not None and tokens.prompt_token_ids and tokens.completion_token_ids is not None:
        return len(tokens.prompt_token_ids) + len(tokens.completion_token_ids)
    usage = completion.usage or {}
    prompt, generated = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt and generated is not None:
        return prompt + generated
    return usage.get("total_tokens") or None


class ContextMeter:
    """Sizes the next prompt of one context segment (see the module docstring)."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.tools_chars = len(json.dumps(tools)) if tools else 0
        self.restart()

    def restart(self) -> None:
        """A new context: nothing counted yet."""
        self._cumulative = [0]
        """Characters of the first i messages, for i = 0..messages seen."""
        self._counted: int | None = None
        """Tokens of the context up to ``_counted_upto`` messages, as the server counted them."""
        self._counted_upto = 0

    def observe(self, messages: list[dict[str, Any]], completion: Completion) -> None:
        """Record the server's count after ``completion``'s message was appended to
        ``messages``: the count covers every message so far."""
        self._see(messages)
        self._counted = server_count(completion)
        self._counted_upto = len(messages)

    def next_prompt(self, messages: list[dict[str, Any]]) -> tuple[int, bool]:
        """The size in tokens of a prompt holding ``messages``, and whether it is estimated."""
        self._see(messages)
        if self._counted is not None:
            start, base, tools = self._counted_upto, self._counted, 0
        else:
            start, base, tools = 0, 0, self.tools_chars
        chars = self._cumulative[len(messages)] - self._cumulative[start] + tools
        appended = len(messages) - start
        if appended == 0 and not tools:
            return base, False
        estimate = math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * appended
        return base + estimate, True

    def _see(self, messages: list[dict[str, Any]]) -> None:
        cumulative = self._cumulative
        for message in messages[len(cumulative) - 1 :]:
            cumulative.append(cumulative[-1] + message_chars(message))
