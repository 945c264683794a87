"""The capture endpoint's HTTP server, on envfarm's loopback, one per episode.

The agent reaches it through the sandbox's port relay (``sandbox.forwarding``), never a
network. It speaks OpenAI's ``/v1/chat/completions`` (streaming included), the Responses API
(``/v1/responses``, Codex CLI) and Anthropic's ``/v1/messages``; the last two are translated to
chat completions (``translate``) and their answers back. ``/v1/models`` lists the one model.
Any API key is accepted: the agent holds a placeholder, never a user's key.

Every answer is one write (a streamed one too: its events are all known when the completion
is, so they go out together), since each write is a frame over the helper stream and a wakeup
on each side of it; orjson does the JSON work when it is installed.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web

try:
    import orjson

    _loads: Any = orjson.loads
    _dumps: Any = orjson.dumps
except ImportError:  # pragma: no cover - the fallback when orjson is not installed
    _loads = json.loads

    def _dumps(value: Any) -> bytes:
        return json.dumps(value).encode()


from envfarm.agent.capture import translate
from envfarm.agent.capture.session import CaptureRefusal, CaptureSession
from envfarm.policy.base import Completion


class CaptureServer:
    def __init__(self, session: CaptureSession, *, model: str) -> None:
        self.session, self.model = session, model
        self.port = 0
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)

    async def __aenter__(self) -> CaptureServer:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._runner.cleanup()

    async def _models(self, _: web.Request) -> web.Response:
        return _json(
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "envfarm"}],
            }
        )

    async def _body(self, request: web.Request) -> Any:
        try:
            body = _loads(await request.read())
        except ValueError:
            body = None
        self.session.record_raw(body if isinstance(body, dict) else {"unparsable": True})
        return body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        try:
            completion = await self.session.complete(body)
        except CaptureRefusal as refusal:
            return _json(refusal.body(), status=refusal.status)
        answer = chat_response(completion, self.model)
        if body.get("stream"):
            return await _stream(request, translate.chat_chunks(answer, body), sse_event=False)
        return _json(answer)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        chat = translate.responses_to_chat(body) if isinstance(body, dict) else body
        try:
            completion = await self.session.complete(chat)
        except CaptureRefusal as refusal:
            return _json(refusal.body(), status=refusal.status)
        answer = translate.chat_to_response(chat_response(completion, self.model))
        if body.get("stream"):
            return await _stream(request, translate.response_events(answer), sse_event=True)
        return _json(answer)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        chat = translate.messages_to_chat(body) if isinstance(body, dict) else body
        try:
            completion = await self.session.complete(chat)
        except CaptureRefusal as refusal:
            error = {"type": "error", "error": {"type": refusal.kind, "message": str(refusal)}}
            return _json(error, status=refusal.status)
        answer = translate.chat_to_message(chat_response(completion, self.model))
        if body.get("stream"):
            return await _stream(request, translate.message_events(answer), sse_event=True)
        return _json(answer)


def chat_response(completion: Completion, model: str) -> dict[str, Any]:
    """The OpenAI chat.completion body the agent gets (token data stays with envfarm)."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": completion.message,
                "finish_reason": completion.finish_reason or "stop",
                "logprobs": None,
            }
        ],
        "usage": completion.usage or {},
    }


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(body), status=status, content_type="application/json")


async def _stream(
    request: web.Request, events: list[dict[str, Any]], *, sse_event: bool
) -> web.StreamResponse:
    parts = []
    for event in events:
        if sse_event:
            parts.append(b"event: " + event["type"].encode() + b"\n")
        parts += [b"data: ", _dumps(event), b"\n\n"]
    if not sse_event:
        parts.append(b"data: [DONE]\n\n")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write_eof(b"".join(parts))
    return response
