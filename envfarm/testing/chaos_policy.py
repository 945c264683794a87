"""A policy endpoint that misbehaves on purpose: 503 storms, garbage bodies, truncated
responses and slow answers, mixed into a policy that solves every task of one shape.

``ChaosResponder`` answers a session whose history has no tool result yet with one ``bash``
call (``command``), and any later request with ``submit``: so every episode that is not
broken by infrastructure earns the task's full reward, and any other score is a fault that
was scored. Before answering, it injects faults at random (``rate``), taking the kinds in
turn, each until it has been injected ``cap`` times. ``ChaosPolicyServer`` is a
``PolicyServer`` that can also cut a response short: the status line and a ``Content-Length``
for the whole body go out, half the body follows, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any, Literal

from aiohttp import web

from envfarm.policy.base import ToolCallRaw
from envfarm.policy.server import PolicyServer, Reply, completion_reply, error_reply

FaultKind = Literal["storm", "garbage", "truncated", "slow"]
FAULT_KINDS: tuple[FaultKind, ...] = ("storm", "garbage", "truncated", "slow")
TRUNCATED = "x-envfarm-chaos-truncate"
"""A reply header asking ``ChaosPolicyServer`` to send half the body and hang up."""


class ChaosResponder:
    def __init__(
        self,
        command: str,
        *,
        rate: float = 0.3,
        cap: int = 12,
        storm_length: int = 3,
        slow_s: float = 4.0,
        seed: int = 0,
    ) -> None:
        self.command, self.rate, self.cap = command, rate, cap
        self.storm_length, self.slow_s = storm_length, slow_s
        self.random = random.Random(seed)
        self.injected: Counter[str] = Counter()
        """Faults injected per kind (a storm counts once, however many 503s it sent)."""
        self.requests = 0
        self._storm_left = 0
        self._turn = 0

    @property
    def done(self) -> bool:
        return all(self.injected[kind] >= self.cap for kind in FAULT_KINDS)

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests += 1
        if self._storm_left:
            self._storm_left -= 1
            return self._unavailable()
        answer = self._answer(request)
        kind = self._fault()
        if kind == "storm":
            self._storm_left = self.storm_length - 1
            return self._unavailable()
        if kind == "garbage":
            garbage = self.random.choice([b"<html>502 Bad Gateway</html>", b"\x00\xff\xfe{",
                                          b'{"choices": "none"}', b"[]", b""])  # fmt: skip
            return Reply(body=garbage, headers={"Content-Type": "application/json"})
        if kind == "truncated":
            return answer.model_copy(update={"headers": {**answer.headers, TRUNCATED: "1"}})
        if kind == "slow":
            await asyncio.sleep(self.slow_s)
        return answer

    def _fault(self) -> FaultKind | None:
        open_kinds = [kind for kind in FAULT_KINDS if self.injected[kind] < self.cap]
        if not open_kinds or self.random.random() >= self.rate:
            return None
        kind = open_kinds[self._turn % len(open_kinds)]
        self._turn += 1
        self.injected[kind] += 1
        return kind

    def _unavailable(self) -> Reply:
        reply = error_reply(503, "the model is being reloaded", type="server_error")
        return reply.model_copy(update={"headers": {"Retry-After": "0.2"}})

    def _answer(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages")
        answered = isinstance(messages, list) and any(
            isinstance(m, dict) and m.get("role") == "tool" for m in messages
        )
        model = request.get("model")
        name, arguments = ("submit", {}) if answered else ("bash", {"command": self.command})
        call = ToolCallRaw(id=f"call_{self.requests}", name=name, arguments=json.dumps(arguments))
        return completion_reply(model if isinstance(model, str) else "chaos", tool_calls=[call])


class ChaosPolicyServer(PolicyServer):
    """``PolicyServer`` that honours ``TRUNCATED``: half the body, then the connection closes."""

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        reply = self._unauthorized(request) or await self._answer(await request.read())
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        if TRUNCATED not in reply.headers:
            kind = "application/json" if isinstance(reply.body, dict) else "text/plain"
            headers = {"Content-Type": kind, **reply.headers}
            return web.Response(status=reply.status, body=body, headers=headers)
        response = web.StreamResponse(status=reply.status)
        response.content_type = "application/json"
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        if request.transport is not None:
            request.transport.close()
        return response
