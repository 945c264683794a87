"""A zero-latency policy in this process: ``turns`` bash calls, then ``submit``.

For load simulation of the controller (bench/sessions.py, bench/workers.py): no HTTP, no
serialization, so what is measured is the controller's own work per turn. An optional
``latency_s`` (a callable drawing each turn's latency, or a constant) simulates a model server.
Use ``PolicyServer`` with a ``ScriptedResponder`` to test the real client over HTTP instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from envfarm.policy.base import Completion, PolicyClient, SamplingParams, ToolCallRaw

ENDPOINT = "in-process://scripted"


class ScriptedPolicyClient(PolicyClient):
    def __init__(
        self,
        turns: int,
        *,
        command: str = "true",
        latency_s: float | Callable[[], float] = 0.0,
        model: str = "scripted",
    ) -> None:
        self.turns = turns
        self.command = command
        self.latency_s = latency_s
        self.model = model
        self.calls = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> Completion:
        self.calls += 1
        delay = self.latency_s() if callable(self.latency_s) else self.latency_s
        if delay > 0:
            await asyncio.sleep(delay)
        done = sum(1 for message in messages if message.get("role") == "assistant")
        name, arguments = ("bash", f'{{"command": "{self.command}"}}')
        if done >= self.turns:
            name, arguments = "submit", "{}"
        call = ToolCallRaw(id=f"call_{done}", name=name, arguments=arguments)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
            ],
        }  # fmt: skip
        return Completion(
            content=None,
            tool_calls=[call],
            finish_reason="tool_calls",
            usage=None,
            latency_s=delay,
            endpoint=ENDPOINT,
            model=self.model,
            message=message,
            sampling={},
        )
