"""envfarm's own OpenAI-compatible policy server on loopback.

The built-in policies (``oracle``, ``nop``) and the scripted test policy run behind a real HTTP
server, so every episode talks to its policy through the same ``OpenAIPolicy`` client and the
same wire format as a production vLLM endpoint. The server owns the protocol edges (routing,
JSON parsing, model names, API key); a ``Responder`` only maps a request to a ``Reply``.
Error bodies follow OpenAI's ``{"error": {message, type, param, code}}`` shape.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import PolicyConfigError
from envfarm.policy.base import ToolCallRaw

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 256 * 1024 * 1024
"""Long agent sessions send large histories; aiohttp's 1 MiB default would reject them."""


class Reply(BaseModel):
    """What a responder answers: a JSON object or raw bytes, with a status and headers."""

    model_config = ConfigDict(extra="forbid")

    status: int = 200
    body: dict[str, Any] | bytes = b""
    headers: dict[str, str] = Field(default_factory=dict)


Responder = Callable[[dict[str, Any]], Awaitable[Reply]]


def error_reply(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> Reply:
    """A reply in OpenAI's error shape."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return Reply(status=status, body={"error": error})


def completion_reply(
    model: str,
    *,
    content: str | None = None,
    tool_calls: Sequence[ToolCallRaw] = (),
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    choice_extra: dict[str, Any] | None = None,
    response_extra: dict[str, Any] | None = None,
) -> Reply:
    """A ``chat.completion`` reply in the shape OpenAI and vLLM return."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
        **(choice_extra or {}),
    }
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        **(response_extra or {}),
    }
    return Reply(body=body)


class PolicyServer:
    """Serves ``POST /v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1.

    ``model_names`` empty (the default) accepts any model; otherwise an unknown model gets
    OpenAI's 404 ``model_not_found``. With ``api_key`` set, requests must carry it as a bearer
    token (as ``vllm serve --api-key`` does). ``port`` 0 picks a free port;
    ``start()`` after ``close()`` serves again on the same port (an endpoint that came back).
    """

    def __init__(
        self,
        responder: Responder,
        *,
        model_names: Sequence[str] = (),
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder = responder
        self.model_names = tuple(model_names)
        self._api_key = api_key
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """E.g. ``http://127.0.0.1:PORT/v1``; available once the server is started."""
        if self._base_url is None:
            raise PolicyConfigError("PolicyServer.base_url read before start (use `async with`)")
        return self._base_url

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._port = port  # a restart after close() comes back at the same URL
        self._base_url = f"http://{host}:{port}/v1"

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> PolicyServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _unauthorized(self, request: web.Request) -> Reply | None:
        if self._api_key is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self._api_key}":
            return None
        return error_reply(401, "Incorrect or missing API key.", code="invalid_api_key")

    async def _models(self, request: web.Request) -> web.StreamResponse:
        denied = self._unauthorized(request)
        if denied is not None:
            return _respond(denied)
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "envfarm"}
            for name in self.model_names
        ]
        return _respond(Reply(body={"object": "list", "data": data}))

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        reply = self._unauthorized(request) or await self._answer(await request.read())
        return _respond(reply)

    async def _answer(self, raw: bytes) -> Reply:
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            return error_reply(400, f"The request body is not valid JSON: {exc}")
        if not isinstance(payload, dict):
            return error_reply(400, "The request body must be a JSON object.")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            return error_reply(400, "The request must name a `model` (a string).", param="model")
        if self.model_names and model not in self.model_names:
            return error_reply(404, f"The model `{model}` does not exist.", code="model_not_found")
        try:
            return await self.responder(payload)
        except Exception as exc:
            log.exception("policy responder failed")
            message = f"The policy responder failed: {type(exc).__name__}: {exc}"
            return error_reply(500, message, type="server_error")


def _respond(reply: Reply) -> web.Response:
    if isinstance(reply.body, dict):
        headers = {"Content-Type": "application/json", **reply.headers}
        return web.Response(status=reply.status, body=json.dumps(reply.body), headers=headers)
    headers = {"Content-Type": "text/plain; charset=utf-8", **reply.headers}
    return web.Response(status=reply.status, body=reply.body, headers=headers)
