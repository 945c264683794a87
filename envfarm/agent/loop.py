"""The multi-step tool-calling loop: ask the policy, run its tool calls, repeat.

Limits live in one place (``AgentLimits``) and are checked before each model call: turns and
wall-clock time. Hitting one is a real outcome of the episode (it is graded), not a fault.
A reply without a tool call gets a nudge; too many in a row end the session. Policy and sandbox
errors propagate: they are infrastructure, and the controller decides what to do with them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from envfarm.agent.tools import SUBMIT, ToolContext, parse_arguments, run_tool, tool_schemas
from envfarm.models.samples import PromptCompactor
from envfarm.models.trajectory import AgentOutcome, StopReason, Turn, Usage
from envfarm.policy.base import Completion, PolicyClient, SamplingParams
from envfarm.policy.tokens import TokenData
from envfarm.sandbox.base import Sandbox

SYSTEM_PROMPT = """\
You are an autonomous software engineer working in a Linux environment through tools.
Use `bash` to run commands, `read_file`, `write_file` and `edit_file` to work with files.
Work until the task is done, check your work, then call `submit`. Nothing runs after `submit`.
The working directory is {workdir}."""

NUDGE = (
    "Your reply contained no tool call. Use the tools to work on the task, "
    "and call `submit` when you are done."
)


class AgentLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = 50
    timeout_s: float | None = None
    """Wall-clock budget of the whole agent phase (task.toml [agent].timeout_sec)."""
    command_timeout_s: float = 120.0
    max_output_chars: int = 16_000
    max_idle_replies: int = 2
    """Replies without a tool call tolerated in a row before the session ends."""


class AgentRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    turns: list[Turn]
    outcome: AgentOutcome


class Agent:
    def __init__(
        self,
        policy: PolicyClient,
        sandbox: Sandbox,
        *,
        limits: AgentLimits,
        tools: ToolContext,
        sampling: SamplingParams,
    ) -> None:
        self.policy, self.sandbox = policy, sandbox
        self.limits, self.tools, self.sampling = limits, tools, sampling
        self.messages: list[dict[str, Any]] = []
        self.turns: list[Turn] = []
        self.malformed = 0
        self.prompts = PromptCompactor()
        """Keeps recorded prompts compact: storage stays linear in the number of turns."""

    async def run(self, instruction: str) -> AgentRun:
        workdir = self.tools.workdir or "/"
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(workdir=workdir)},
            {"role": "user", "content": instruction},
        ]
        stop_reason: StopReason
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                stop_reason = await self._loop()
        except TimeoutError:
            stop_reason = "timeout"
        outcome = AgentOutcome(
            stop_reason=stop_reason,
            turns=len(self.turns),
            malformed_tool_calls=self.malformed,
        )
        return AgentRun(messages=self.messages, turns=self.turns, outcome=outcome)

    async def _loop(self) -> StopReason:
        idle = 0
        deadline = time.monotonic() + (self.limits.timeout_s or float("inf"))
        while len(self.turns) < self.limits.max_turns:
            completion = await self.policy.complete(self.messages, tool_schemas(), self.sampling)
            turn = self._record(completion)
            self.messages.append(completion.message)
            if not completion.tool_calls:
                idle += 1
                if idle > self.limits.max_idle_replies:
                    return "no_tool_call"
                self.messages.append({"role": "user", "content": NUDGE})
                continue
            idle = 0
            for call in completion.tool_calls:
                remaining = deadline - time.monotonic()
                context = self.tools.model_copy(
                    update={"command_timeout_s": min(self.tools.command_timeout_s, remaining)}
                )
                args = parse_arguments(call)
                self.malformed += isinstance(args, str)
                result = await run_tool(call, args, self.sandbox, context)
                turn.tool_results.append(result)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result.output}
                )
                if call.name == SUBMIT and result.error is None:
                    return "submitted"
        return "max_turns"

    def _record(self, completion: Completion) -> Turn:
        usage = None
        if completion.usage:
            usage = Usage.model_validate(
                {k: v for k, v in completion.usage.items() if k in Usage.model_fields}
            )
        tokens = completion.tokens or TokenData()
        turn = Turn(
            index=len(self.turns),
            finish_reason=completion.finish_reason,
            sampling=completion.sampling,
            latency_s=completion.latency_s,
            usage=usage,
            endpoint=completion.endpoint,
            **tokens.turn_fields(),
        )
        self.prompts.add(turn)
        self.turns.append(turn)
        return turn
