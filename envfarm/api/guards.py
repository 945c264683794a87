"""The door of the API: bearer-token auth and the request-body limit, as one ASGI wrapper.

It sits outside the routes so it covers everything, the OpenAPI document and unknown paths
included (an anonymous caller learns nothing, not even which paths exist); only ``/healthz``
is open. Tokens are compared in constant time. A body is refused with 413 as soon as its
declared length, or the bytes actually received, pass the limit.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envfarm.api.problems import problem, problem_response

OPEN_PATHS = frozenset({"/healthz"})


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        open_paths: Collection[str] = OPEN_PATHS,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.token is not None and scope["path"] not in self.open_paths:
            refusal = self._refusal(headers.get(b"authorization"))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large()(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    def _refusal(self, authorization: bytes | None) -> JSONResponse | None:
        scheme, _, credentials = (authorization or b"").partition(b" ")
        assert self.token is not None
        if scheme.lower() == b"bearer" and secrets.compare_digest(credentials.strip(), self.token):
            return None
        if authorization is None:
            detail = "this server needs `Authorization: Bearer TOKEN`"
            challenge = 'Bearer realm="envfarm"'
        else:
            detail = "the bearer token is wrong"
            challenge = 'Bearer realm="envfarm", error="invalid_token"'
        return problem_response(
            problem(401, "unauthorized", detail), {"WWW-Authenticate": challenge}
        )

    def _too_large(self) -> JSONResponse:
        detail = f"request bodies are limited to {self.max_body_bytes} bytes"
        return problem_response(problem(413, "body-too-large", detail))

    def _counting(self, receive: Receive) -> Receive:
        received = 0
        limit = self.max_body_bytes

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, f"request bodies are limited to {limit} bytes")
            return message

        return counted
