"""The tools an agent can call, their JSON schemas, and their execution in a sandbox.

A tool call the model got wrong (bad JSON, unknown tool, missing or extra argument, a file that
does not exist) is answered with an error observation and the episode goes on: that is the
model's mistake, part of the trajectory. Sandbox failures are not caught here; they are
infrastructure and end the attempt.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from envfarm.models.trajectory import ToolResult
from envfarm.policy.base import ToolCallRaw
from envfarm.sandbox.base import Sandbox

SUBMIT = "submit"


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str
    timeout: float | None = None


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    content: str


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    old: str
    new: str


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


ARG_MODELS: dict[str, type[BaseModel]] = {
    "bash": BashArgs,
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    SUBMIT: SubmitArgs,
}

DESCRIPTIONS = {
    "bash": "Run a bash command in the environment and return its output and exit code.",
    "read_file": "Return the content of a text file.",
    "write_file": "Create or overwrite a file with the given content.",
    "edit_file": "Replace the single occurrence of `old` in a file with `new`.",
    SUBMIT: "Finish the task. Call this once your work is complete; nothing runs after it.",
}


@functools.cache
def tool_schemas() -> list[dict[str, Any]]:
    """The tools' OpenAI function specs; built once (callers must not modify them)."""
    schemas = []
    for name, model in ARG_MODELS.items():
        parameters = model.model_json_schema()
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        parameters.setdefault("properties", {})
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": DESCRIPTIONS[name],
                    "parameters": parameters,
                },
            }
        )
    return schemas


class ToolContext(BaseModel):
    """What a tool call needs to know about where it runs."""

    model_config = ConfigDict(extra="forbid")
    workdir: str | None = None
    user: str | None = None
    env: dict[str, str] = {}
    command_timeout_s: float = 120.0
    max_output_chars: int = 16_000


def truncate(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    head, tail = text[: limit // 2], text[-(limit // 2) :]
    marker = f"\n[... {len(text) - len(head) - len(tail)} characters truncated ...]\n"
    return head + marker + tail, True


SANITIZED_ARGUMENTS = "{}"
"""What the history sends in place of tool-call arguments that are not a JSON object."""


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def sanitized_message(message: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """``message`` as the history may send it back to a server (tool-call arguments that are
    not a JSON object become ``{}``), and the ids of the calls so changed."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return message, set()
    out_calls: list[Any] = []
    changed: list[str] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if (
            isinstance(function, dict)
            and isinstance(arguments, str)
            and not _json_object(arguments)
        ):
            changed.append(str(call.get("id")))
            call = {**call, "function": {**function, "arguments": SANITIZED_ARGUMENTS}}
        out_calls.append(call)
    if not changed:
        return message, set()
    return {**message, "tool_calls": out_calls}, set(changed)


def parse_arguments(call: ToolCallRaw) -> BaseModel | str:
    """The validated arguments, or an error message for the model."""
    model = ARG_MODELS.get(call.name)
    if model is None:
        return f"unknown tool {call.name!r}; available tools: {', '.join(ARG_MODELS)}"
    try:
        raw = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return f"arguments of {call.name!r} are not valid JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(raw, dict):
        return f"arguments of {call.name!r} must be a JSON object, got {type(raw).__name__}"
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
        allowed = ", ".join(model.model_fields) or "none"
        return f"bad arguments for {call.name!r}: {problems} (allowed: {allowed})"


async def run_tool(
    call: ToolCallRaw, args: BaseModel | str, sandbox: Sandbox, ctx: ToolContext
) -> ToolResult:
    """Run ``call`` whose arguments ``parse_arguments`` gave as ``args``."""
    started = time.monotonic()
    exit_code: int | None = None
    error: str | None = None
    if isinstance(args, str):
        output, error = f"Error: {args}", args
    elif isinstance(args, BashArgs):
        output, exit_code = await _bash(args, sandbox, ctx)
    elif isinstance(args, SubmitArgs):
        output = "Submitted."
    else:
        output, error = await _file_tool(args, sandbox, ctx)
    output, truncated = truncate(output, ctx.max_output_chars)
    return ToolResult(
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        output=output,
        truncated=truncated,
        exit_code=exit_code,
        duration_s=time.monotonic() - started,
        error=error,
    )


async def _bash(args: BashArgs, sandbox: Sandbox, ctx: ToolContext) -> tuple[str, int | None]:
    timeout = min(args.timeout or ctx.command_timeout_s, ctx.command_timeout_s)
    result = await sandbox.exec(
        args.command, timeout=timeout, workdir=ctx.workdir, env=ctx.env, user=ctx.user
    )
    parts = [result.stdout]
    if result.stderr:
        parts.append(f"[stderr]\n{result.stderr}")
    if result.timed_out:
        parts.append(f"[command timed out after {timeout:g}s and was killed]")
    else:
        parts.append(f"[exit code: {result.exit_code}]")
    return "\n".join(p.rstrip("\n") for p in parts if p), result.exit_code


def _absolute(path: str, ctx: ToolContext) -> str:
    if path.startswith("/"):
        return path
    return f"{(ctx.workdir or '/').rstrip('/')}/{path}"


async def _file_tool(args: BaseModel, sandbox: Sandbox, ctx: ToolContext) -> tuple[str, str | None]:
    path = _absolute(getattr(args, "path"), ctx)  # noqa: B009
    if isinstance(args, WriteFileArgs):
        return await _write(sandbox, path, args.content, ctx)
    try:
        content = (await sandbox.read_file(path, user=_file_user(sandbox, ctx))).decode(
            errors="replace"
        )
    except FileNotFoundError:
        return _err(f"no such file: {path}")
    except IsADirectoryError:
        return _err(f"{path} is a directory")
    except OSError as exc:
        return _err(str(exc))
    if isinstance(args, ReadFileArgs):
        return content, None
    assert isinstance(args, EditFileArgs)
    count = content.count(args.old) if args.old else 0
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times; make it unique"
        return _err(f"`old` must occur exactly once in {path}: {found}")
    return await _write(sandbox, path, content.replace(args.old, args.new, 1), ctx)


async def _write(
    sandbox: Sandbox, path: str, content: str, ctx: ToolContext
) -> tuple[str, str | None]:
    try:
        await sandbox.write_file(path, content.encode(), user=_file_user(sandbox, ctx))
    except OSError as exc:
        return _err(str(exc))
    return f"Wrote {len(content.encode())} bytes to {path}.", None


def _file_user(sandbox: Sandbox, ctx: ToolContext) -> str | None:
    """File tools act with the permissions of the user the agent's commands run as."""
    return ctx.user or sandbox.default_user


def _err(message: str) -> tuple[str, str]:
    return f"Error: {message}", message
