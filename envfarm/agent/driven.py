"""The agent phase of an episode driven from outside: a trainer's loop sends each tool call.

A trainer that owns sampling (OpenEnv's ``reset/step``, TRL's ``environment_factory``) calls
the environment one action at a time. Its episode is otherwise an ordinary one: the runner
provisions, snapshots for tamper flags, grades in the clean room and tears down exactly as for
the built-in loop (``controller/episode.py``); only this phase differs. Actions run through the
built-in loop's tool code (``agent/tools.py``, the task's MCP tools through ``ExtraTools``),
with the same command timeout, output limit, turn limit and wall-clock budget. The phase ends
on ``submit`` (``submitted``), at the turn or time limit (graded as it stands, like the loop),
or when the driver abandons the session (``SessionAbandoned``: recorded, never graded).

Each action is recorded as a turn without token data (the trainer sampled it, envfarm did
not), and as an assistant message with one tool call followed by its tool message.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from envfarm.agent.extra_tools import ExtraTools, offered_schemas, run_extra_tool
from envfarm.agent.loop import AgentLimits, AgentRun
from envfarm.agent.tools import SUBMIT, ToolContext, parse_arguments, run_tool
from envfarm.errors import EnvfarmError, SessionAbandoned, SessionEnded
from envfarm.models.trajectory import AgentOutcome, StopReason, ToolResult, Trajectory, Turn
from envfarm.policy.base import ToolCallRaw
from envfarm.sandbox.base import Sandbox


@dataclass(frozen=True)
class Opening:
    """What the driver learns once the sandbox is ready: the instruction and the tools."""

    instruction: str
    tools: list[dict[str, Any]]


@dataclass
class _Action:
    call: ToolCallRaw
    answer: asyncio.Future[tuple[ToolResult, StopReason | None]]


@dataclass
class Driver:
    """The channel between a driven session and its episode's agent phase."""

    opened: asyncio.Future[Opening] = field(default_factory=asyncio.Future)
    finished: asyncio.Future[Trajectory] = field(default_factory=asyncio.Future)
    """The episode's trajectory once it is recorded (graded, or abandoned) and its slot free."""
    trajectory: Trajectory | None = None
    """The recorded trajectory, before ``finished`` is set."""
    _actions: asyncio.Queue[_Action | EnvfarmError] = field(default_factory=asyncio.Queue)
    partial: AgentRun | None = None
    """The actions taken before the session was abandoned, for the record."""
    _ended: bool = False

    @property
    def ended(self) -> bool:
        return self._ended

    async def act(
        self, tool: str, arguments: dict[str, Any] | str
    ) -> tuple[ToolResult, StopReason | None]:
        """Run one tool call; the stop reason is set when this call ended the agent phase."""
        if self._ended:
            raise SessionEnded("the session has ended: reset to start another")
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = ToolCallRaw(id=f"call_{uuid.uuid4().hex[:12]}", name=tool, arguments=raw)
        answer: asyncio.Future[tuple[ToolResult, StopReason | None]] = asyncio.Future()
        await self._actions.put(_Action(call, answer))
        return await answer

    def abandon(self, reason: str) -> None:
        """End the agent phase without grading (a no-op once it has ended)."""
        if not self._ended:
            self._actions.put_nowait(SessionAbandoned(reason))

    async def drive(
        self,
        sandbox: Sandbox,
        instruction: str,
        *,
        limits: AgentLimits,
        tools: ToolContext,
        extra_tools: ExtraTools | None = None,
    ) -> AgentRun:
        """The agent phase: serve actions until submit, a limit, or abandonment."""
        schemas = offered_schemas(extra_tools)
        messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        turns: list[Turn] = []
        malformed = 0
        deadline = time.monotonic() + (limits.timeout_s or float("inf"))
        if not self.opened.done():
            self.opened.set_result(Opening(instruction, schemas))
        stop: StopReason | None = None
        try:
            while stop is None:
                remaining = deadline - time.monotonic()
                try:
                    async with asyncio.timeout(remaining if remaining != float("inf") else None):
                        item = await self._actions.get()
                except TimeoutError:
                    stop = "timeout"
                    break
                if isinstance(item, EnvfarmError):
                    outcome = AgentOutcome(stop_reason="error", turns=len(turns))
                    self.partial = AgentRun(messages=messages, turns=turns, outcome=outcome)
                    raise item
                context = tools.model_copy(
                    update={"command_timeout_s": min(tools.command_timeout_s, remaining)}
                )
                try:
                    result, bad_arguments = await _run(item.call, sandbox, context, extra_tools)
                except BaseException as exc:
                    item.answer.set_exception(SessionEnded(f"the environment failed: {exc}"))
                    raise
                malformed += bad_arguments
                turns.append(Turn(index=len(turns), tool_results=[result]))
                messages += _exchange(item.call, result)
                if item.call.name == SUBMIT and result.error is None:
                    stop = "submitted"
                elif len(turns) >= limits.max_turns:
                    stop = "max_turns"
                item.answer.set_result((result, stop))
        finally:
            self._ended = True
            self._refuse_waiting()
        outcome = AgentOutcome(stop_reason=stop, turns=len(turns), malformed_tool_calls=malformed)
        return AgentRun(messages=messages, turns=turns, outcome=outcome)

    def _refuse_waiting(self) -> None:
        while not self._actions.empty():
            item = self._actions.get_nowait()
            if isinstance(item, _Action) and not item.answer.done():
                item.answer.set_exception(SessionEnded("the session ended before this action"))


async def _run(
    call: ToolCallRaw, sandbox: Sandbox, context: ToolContext, extra_tools: ExtraTools | None
) -> tuple[ToolResult, bool]:
    """The call's result, and whether its arguments were malformed (counted like the loop's)."""
    if extra_tools is not None and extra_tools.offers(call.name):
        return await run_extra_tool(call, extra_tools, context), False
    args = parse_arguments(call)
    return await run_tool(call, args, sandbox, context), isinstance(args, str)


def _exchange(call: ToolCallRaw, result: ToolResult) -> list[dict[str, Any]]:
    """The action as chat messages: the trainer's tool call, then what the tool answered."""
    function = {"name": call.name, "arguments": call.arguments}
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": result.output},
    ]
