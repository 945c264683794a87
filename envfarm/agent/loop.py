"""The multi-step tool-calling loop: ask the policy, run its tool calls, repeat.

Limits live in one place (``AgentLimits``) and are checked before each model call: turns and
wall-clock time. Hitting one is a real outcome of the episode (it is graded), not a fault.
A reply without a tool call gets a nudge; too many in a row end the session. Policy and sandbox
errors propagate: they are infrastructure, and the controller decides what to do with them.

Model faults stay data. A completion cut at ``max_tokens`` (``length``) is recorded and the
session goes on: a cut-off tool call is malformed, answered with an error, and counted. The
arguments of a malformed call are kept verbatim in the turn's ``tool_results`` but sent back in
the history as ``{}`` (``sent_arguments``), since servers reject (llama.cpp: HTTP 500) a history
whose tool-call arguments are not JSON. A prompt the server refuses as longer than the model's
context ends the session with ``context_length``, graded as it stands.

With a context budget, a prompt that would exceed it is replaced by a summary request, and the
session goes on in a new context segment that starts from the instruction and the summary
(``agent.context``). A segment is summarized only once it has an action turn of its own, so a
summary too long for the budget costs turns, never an endless chain of summaries. Summary turns
are model calls and count against ``max_turns``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.agent.context import SUMMARY_REQUEST, ContextMeter, resumed_instruction
from envfarm.agent.extra_tools import ExtraTools, offered_schemas, run_extra_tool
from envfarm.agent.tools import (
    SANITIZED_ARGUMENTS,
    SUBMIT,
    ToolContext,
    parse_arguments,
    run_tool,
    sanitized_message,
)
from envfarm.errors import ContextLengthExceeded
from envfarm.models.token_layout import PromptCompactor
from envfarm.models.trajectory import AgentOutcome, Segment, StopReason, Turn, TurnKind, Usage
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
    context_budget: int | None = Field(default=None, gt=0)
    """Tokens a prompt may hold before the model is asked to summarize and the context restarts
    from the instruction and the summary; None: never summarize."""


class AgentRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    turns: list[Turn]
    segments: list[Segment] = Field(default_factory=list)
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
        extra_tools: ExtraTools | None = None,
    ) -> None:
        self.policy, self.sandbox = policy, sandbox
        self.limits, self.tools, self.sampling = limits, tools, sampling
        self.extra_tools = extra_tools
        self.messages: list[dict[str, Any]] = []
        self.turns: list[Turn] = []
        self.segments: list[Segment] = []
        self.malformed = 0
        self.instruction = ""
        self.first_turn = 0
        """The first turn of the current session (``resume`` starts another)."""
        self.meter = ContextMeter(self.schemas)
        self.prompts = PromptCompactor()
        """Keeps recorded prompts compact: storage stays linear in the number of turns."""

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools offered to the model: the built-in ones, then the task's own."""
        return offered_schemas(self.extra_tools)

    async def run(self, instruction: str) -> AgentRun:
        self.instruction = instruction
        self._start_context(instruction)
        return await self._session()

    async def resume(self, instruction: str, limits: AgentLimits | None = None) -> AgentRun:
        """Go on in the same context with a new user message (the next step of a multi-step
        task), under ``limits`` (turns and time counted afresh). Turns keep their indices."""
        self.instruction = instruction
        self.limits = limits or self.limits
        self.first_turn = len(self.turns)
        self.messages.append({"role": "user", "content": instruction})
        return await self._session()

    async def _session(self) -> AgentRun:
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
        return AgentRun(
            messages=self.messages, turns=self.turns, segments=self.segments, outcome=outcome
        )

    def _start_context(self, user_message: str) -> None:
        workdir = self.tools.workdir or "/"
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(workdir=workdir)},
            {"role": "user", "content": user_message},
        ]
        self.meter.restart()

    async def _loop(self) -> StopReason:
        idle = 0
        deadline = time.monotonic() + (self.limits.timeout_s or float("inf"))
        acted = False  # the current segment has an action turn, so something to summarize
        while len(self.turns) - self.first_turn < self.limits.max_turns:
            if acted and await self._summarized_if_full():
                acted, idle = False, 0
                continue
            acted = True
            try:
                completion = await self.policy.complete(self.messages, self.schemas, self.sampling)
            except ContextLengthExceeded:
                return "context_length"
            turn = self._record(completion)
            sent, sanitized = sanitized_message(completion.message)
            self.messages.append(sent)
            self.meter.observe(self.messages, completion)
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
                if self.extra_tools is not None and self.extra_tools.offers(call.name):
                    result = await run_extra_tool(call, self.extra_tools, context)
                else:
                    args = parse_arguments(call)
                    self.malformed += isinstance(args, str)
                    result = await run_tool(call, args, self.sandbox, context)
                if call.id in sanitized:
                    result.sent_arguments = SANITIZED_ARGUMENTS
                turn.tool_results.append(result)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result.output}
                )
                if call.name == SUBMIT and result.error is None:
                    return "submitted"
        return "max_turns"

    async def _summarized_if_full(self) -> bool:
        """Summarize and restart the context when the next prompt would exceed the budget."""
        budget = self.limits.context_budget
        if budget is None:
            return False
        size, estimated = self.meter.next_prompt(self.messages)
        if size <= budget:
            return False
        self.messages.append({"role": "user", "content": SUMMARY_REQUEST})
        sampling = self.sampling.model_copy(update={"tool_choice": "none"})
        completion = await self.policy.complete(self.messages, self.schemas, sampling)
        turn = self._record(completion, kind="summary")
        self.messages.append(sanitized_message(completion.message)[0])
        summary = completion.content or ""
        self.segments.append(
            Segment(
                index=turn.segment + 1,
                summary=summary,
                first_turn=len(self.turns),
                summary_turn=turn.index,
                context_budget=budget,
                context_tokens=size,
                context_estimated=estimated,
                prior_messages=self.messages,
            )
        )
        self._start_context(resumed_instruction(self.instruction, summary))
        return True

    def _record(self, completion: Completion, kind: TurnKind = "action") -> Turn:
        turn = turn_from_completion(
            completion, index=len(self.turns), segment=len(self.segments), kind=kind
        )
        self.prompts.add(turn)
        self.turns.append(turn)
        return turn


def turn_from_completion(
    completion: Completion, *, index: int, segment: int = 0, kind: TurnKind = "action"
) -> Turn:
    """The turn a model call is recorded as (the capture endpoint records installed agents'
    calls with it too)."""
    usage = None
    if completion.usage:
        usage = Usage.model_validate(
            {k: v for k, v in completion.usage.items() if k in Usage.model_fields}
        )
    tokens = completion.tokens or TokenData()
    return Turn(
        index=index,
        segment=segment,
        kind=kind,
        finish_reason=completion.finish_reason,
        sampling=completion.sampling,
        latency_s=completion.latency_s,
        attempts=completion.attempts,
        paused_s=completion.paused_s,
        usage=usage,
        endpoint=completion.endpoint,
        **tokens.turn_fields(),
    )
