"""The capture endpoint's HTTP server, one per episode.

The agent reaches it through the sandbox's port relay, never a network: the relay serves each
connection made inside the sandbox with this server's protocol in process
(``sandbox.forwarding.serve_port``, no socket on envfarm's side); ``listen=True`` opens a
loopback TCP port too (tests, the bench). It speaks OpenAI's ``/v1/chat/completions``
(streaming included), the Responses API (``/v1/responses``, Codex CLI) and Anthropic's
``/v1/messages``; the last two are translated to chat completions (``translate``) and their
answers back. ``/v1/models`` lists the one model. Any API key is accepted: the agent holds a
placeholder, never a user's key. An unknown route gets OpenAI's JSON error (404, or 405 for a
known route and another method).

Every answer is one write (a streamed one too: its events are all known when the completion
is, so they go out together), since each write is a frame over the helper stream and a wakeup
on each side of it; orjson does the JSON work when it is installed. The HTTP itself is
``http``'s small server.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

try:
    import orjson

    _loads: Any = orjson.loads
    _dumps: Any = orjson.dumps
except ImportError:  # pragma: no cover - the fallback when orjson is not installed
    _loads = json.loads

    def _dumps(value: Any) -> bytes:
        return json.dumps(value).encode()


from envfarm.agent.capture import translate
from envfarm.agent.capture.http import Answer, HttpConnection, HttpServer, Request
from envfarm.agent.capture.session import CaptureRefusal, CaptureSession
from envfarm.policy.base import Completion

Route = Callable[[Request], Awaitable[Answer]]


class CaptureServer:
    def __init__(self, session: CaptureSession, *, model: str, listen: bool = True) -> None:
        self.session, self.model, self.listen = session, model, listen
        self.port = 0
        """The loopback TCP port (``listen``), else 0."""
        self._routes: dict[str, tuple[str, Route]] = {
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/responses": ("POST", self._responses),
            "/v1/messages": ("POST", self._messages),
            "/v1/models": ("GET", self._models),
        }
        self._http = HttpServer(self._route, _error_body)

    def protocol(self) -> HttpConnection:
        """A protocol for one connection (``serve_port``'s factory)."""
        return self._http.protocol()

    async def __aenter__(self) -> CaptureServer:
        if self.listen:
            self.port = await self._http.listen("127.0.0.1")
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._http.aclose()

    async def _route(self, request: Request) -> Answer:
        route = self._routes.get(request.path)
        if route is None:
            message = f"Invalid URL ({request.method} {request.path})"
            return Answer(404, _error_body(404, message))
        method, serve = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
            message = f"Method {request.method} is not allowed for {request.path}"
            return Answer(405, _error_body(405, message))
        return await serve(request)

    async def _models(self, _: Request) -> Answer:
        return _json(
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "envfarm"}],
            }
        )

    def _body(self, request: Request) -> Any:
        try:
            body = _loads(request.body)
        except ValueError:
            body = None
        self.session.record_raw(body if isinstance(body, dict) else {"unparsable": True})
        return body

    async def _chat(self, request: Request) -> Answer:
        body = self._body(request)
        try:
            completion = await self.session.complete(body)
        except CaptureRefusal as refusal:
            return _json(refusal.body(), status=refusal.status)
        answer = chat_response(completion, self.model)
        if body.get("stream"):
            return _stream(translate.chat_chunks(answer, body), sse_event=False)
        return _json(answer)

    async def _responses(self, request: Request) -> Answer:
        body = self._body(request)
        chat = translate.responses_to_chat(body) if isinstance(body, dict) else body
        try:
            completion = await self.session.complete(chat)
        except CaptureRefusal as refusal:
            return _json(refusal.body(), status=refusal.status)
        answer = translate.chat_to_response(chat_response(completion, self.model))
        if body.get("stream"):
            return _stream(translate.response_events(answer), sse_event=True)
        return _json(answer)

    async def _messages(self, request: Request) -> Answer:
        body = self._body(request)
        chat = translate.messages_to_chat(body) if isinstance(body, dict) else body
        try:
            completion = await self.session.complete(chat)
        except CaptureRefusal as refusal:
            error = {"type": "error", "error": {"type": refusal.kind, "message": str(refusal)}}
            return _json(error, status=refusal.status)
        answer = translate.chat_to_message(chat_response(completion, self.model))
        if body.get("stream"):
            return _stream(translate.message_events(answer), sse_event=True)
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


def _json(body: Any, status: int = 200) -> Answer:
    return Answer(status, _dumps(body))


def _error_body(status: int, message: str) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return bytes(_dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}))


def _stream(events: list[dict[str, Any]], *, sse_event: bool) -> Answer:
    parts = []
    for event in events:
        if sse_event:
            parts.append(b"event: " + event["type"].encode() + b"\n")
        parts += [b"data: ", _dumps(event), b"\n\n"]
    if not sse_event:
        parts.append(b"data: [DONE]\n\n")
    return Answer(200, b"".join(parts), "text/event-stream", streamed=True)
