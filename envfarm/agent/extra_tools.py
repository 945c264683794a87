"""Tools beyond the built-in five, offered by the task (its MCP servers: ``mcp_tools``).

The loop knows them only through ``ExtraTools``: their OpenAI schemas, whether a name is theirs,
and a call that returns text and whether it failed. A call the model got wrong (arguments that
are not a JSON object) and a call the tool reports as failed are error observations, the
model's to handle, like a failing bash command; the episode goes on.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from envfarm.agent.tools import ToolContext, tool_schemas, truncate
from envfarm.models.trajectory import ToolResult
from envfarm.policy.base import ToolCallRaw


class ExtraTools(Protocol):
    schemas: list[dict[str, Any]]

    def offers(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]: ...


def offered_schemas(extra: ExtraTools | None) -> list[dict[str, Any]]:
    """The tools offered to the model: the built-in ones, then the task's own (the built-in
    list itself when there are none, which callers must not modify)."""
    own = extra.schemas if extra is not None else []
    return [*tool_schemas(), *own] if own else tool_schemas()


async def run_extra_tool(call: ToolCallRaw, tools: ExtraTools, ctx: ToolContext) -> ToolResult:
    started = time.monotonic()
    error: str | None = None
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        arguments, error = None, f"arguments are not valid JSON: {exc}"
    if arguments is not None and not isinstance(arguments, dict):
        error = "arguments must be a JSON object"
    if error is None:
        assert isinstance(arguments, dict)
        output, failed = await tools.call(call.name, arguments)
        error = "the tool reported an error" if failed else None
    else:
        output = f"Error: {error}"
    output, truncated = truncate(output, ctx.max_output_chars)
    return ToolResult(
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        output=output,
        truncated=truncated,
        duration_s=time.monotonic() - started,
        error=error,
    )
