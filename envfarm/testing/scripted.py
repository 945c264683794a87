"""A scripted policy: replays a fixed list of steps, one per request.

Serve it with ``PolicyServer`` to test anything that talks to a policy endpoint (the client,
the agent loop, a whole run) over real HTTP. A step is a ``ScriptedCompletion`` (content and/or
tool calls), a bare ``ScriptedToolCall`` or string as shorthand for a completion holding just
that, or a raw ``Reply`` to inject faults (503, garbage bodies, headers such as Retry-After).
Every request is recorded in ``.requests``; a request after the script ends gets a 500 whose
body says so. ``FaultyResponder`` puts such faults in front of any other responder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.policy.base import ToolCallRaw
from envfarm.policy.server import Reply, Responder, completion_reply, error_reply


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: str
    id: str | None = None
    """None: the responder assigns ``call_<step>_<index>``."""


class ScriptedCompletion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    """None: ``tool_calls`` when there are tool calls, else ``stop``."""
    usage: dict[str, int] | None = None
    choice_extra: dict[str, Any] = Field(default_factory=dict)
    """Extra fields for ``choices[0]`` (e.g. ``token_ids``, ``logprobs``)."""
    response_extra: dict[str, Any] = Field(default_factory=dict)
    """Extra fields for the response root (e.g. ``prompt_token_ids``)."""


Step = ScriptedCompletion | ScriptedToolCall | Reply | str


def tool_call(
    name: str, arguments: dict[str, Any] | str, *, id: str | None = None
) -> ScriptedToolCall:
    """A tool call; a string ``arguments`` is sent verbatim (so it may be invalid JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ScriptedToolCall(name=name, arguments=raw, id=id)


def completion(
    content: str | None = None, *calls: ScriptedToolCall, **fields: Any
) -> ScriptedCompletion:
    """A completion with optional content and tool calls; ``fields`` as in ScriptedCompletion."""
    return ScriptedCompletion(content=content, tool_calls=list(calls), **fields)


class ScriptedResponder:
    """Answers the n-th request with the n-th step. Use as a ``PolicyServer`` responder."""

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps: list[ScriptedCompletion | Reply] = [_normalize(s) for s in steps]
        self.requests: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        return max(0, len(self.steps) - len(self.requests))

    async def __call__(self, request: dict[str, Any]) -> Reply:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self.steps):
            message = (
                f"The scripted policy is exhausted: it has {len(self.steps)} steps and this is "
                f"request #{index + 1}."
            )
            return error_reply(500, message, type="server_error", code="script_exhausted")
        step = self.steps[index]
        if isinstance(step, Reply):
            return step
        model = request.get("model")
        calls = [
            ToolCallRaw(id=c.id or f"call_{index}_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(step.tool_calls)
        ]
        return completion_reply(
            model if isinstance(model, str) else "scripted",
            content=step.content,
            tool_calls=calls,
            finish_reason=step.finish_reason,
            usage=step.usage,
            choice_extra=step.choice_extra,
            response_extra=step.response_extra,
        )


class FaultyResponder:
    """Wraps any responder: the first requests get ``faults`` in order (a 503 storm, aborted
    completions, garbage), then ``inner`` answers. ``requests`` records every request."""

    def __init__(self, inner: Responder, faults: Iterable[Step] = ()) -> None:
        self.inner = inner
        self.faults = ScriptedResponder(faults)
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        if self.faults.remaining:
            return await self.faults(request)
        return await self.inner(request)


def _normalize(step: Step) -> ScriptedCompletion | Reply:
    if isinstance(step, str):
        return ScriptedCompletion(content=step)
    if isinstance(step, ScriptedToolCall):
        return ScriptedCompletion(tool_calls=[step])
    return step
