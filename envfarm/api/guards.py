"""The door of the API: bearer-token auth and the request-body limit, as one ASGI wrapper.

It sits outside the routes so it covers everything, the OpenAPI document and unknown paths
included (an anonymous caller learns nothing, not even which paths exist); only ``/healthz``,
the login form ``/ui/login`` and the viewer's stylesheet are open. Tokens are compared in
constant time. A browser's token cookie (set by ``/ui/login``) counts only for ``GET`` and
``HEAD`` requests of the pages ``/ui``, ``/docs``, ``/redoc`` and ``/openapi.json``; a browser
asking for one of those pages (HTML) without credentials is sent to the login form. A body is
refused with 413 as soon as its declared length, or the bytes actually received, pass the limit.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from urllib.parse import quote, unquote

from starlette.exceptions import HTTPException
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envfarm.api.problems import problem, problem_response

OPEN_PATHS = frozenset({"/healthz", "/ui/login"})
OPEN_PREFIXES = ("/ui/static/",)
COOKIE = "envfarm_token"
COOKIE_PAGES = ("/ui", "/docs", "/redoc")
COOKIE_EXACT = frozenset({"/openapi.json"})
SAFE_METHODS = frozenset({"GET", "HEAD"})


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
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        in_path = _path_token(scope)
        if in_path is not None and (
            self.token is None or not secrets.compare_digest(in_path, self.token)
        ):
            await _refuse(scope, receive, send, "the token in the path is wrong")
            return
        path = scope["path"]
        if scope["type"] == "websocket":
            if in_path is None and self.token is not None:
                authorization = headers.get(b"authorization")
                if self._refusal(authorization) is not None:
                    await _refuse(scope, receive, send, "this endpoint needs a token")
                    return
            await self.app(scope, receive, send)
            return
        authorized = in_path is not None or self._open(path) or self._cookie_ok(scope, headers)
        if self.token is not None and not authorized:
            authorization = headers.get(b"authorization")
            refusal = self._refusal(authorization)
            if refusal is not None:
                if authorization is None and _browser_page(scope, headers):
                    target = "/ui/login?next=" + quote(path, safe="/")
                    refusal = RedirectResponse(target, 303)  # type: ignore[assignment]
                await refusal(scope, receive, send)
                return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large()(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    def _open(self, path: str) -> bool:
        return path in self.open_paths or path.startswith(OPEN_PREFIXES)

    def _cookie_ok(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        cookie = headers.get(b"cookie")
        if cookie is None or not _cookie_page(scope):
            return False
        value = cookie_parser(cookie.decode("latin-1")).get(COOKIE)
        assert self.token is not None
        return value is not None and secrets.compare_digest(unquote(value).encode(), self.token)

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


PATH_TOKEN_PREFIX = "/v1/openenv/"
"""Under this prefix the token may be a path segment (``/v1/openenv/TOKEN/ws``): OpenEnv's
client appends ``/ws`` to its base URL and sends no headers (docs/trainers.md)."""


def _path_token(scope: Scope) -> bytes | None:
    """The token segment of a step-API path, cut out of the scope in place (its path and the
    raw path the server logs), so the token reaches neither the routes nor any log line."""
    path: str = scope["path"]
    if not path.startswith(PATH_TOKEN_PREFIX):
        return None
    segment, slash, rest = path[len(PATH_TOKEN_PREFIX) :].partition("/")
    if not slash or not segment:
        return None
    scope["path"] = PATH_TOKEN_PREFIX + rest
    scope["raw_path"] = scope["path"].encode()
    return unquote(segment).encode()


async def _refuse(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
    """401 for HTTP; a WebSocket handshake is closed before it is accepted (HTTP 403)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": detail})
        return
    challenge = 'Bearer realm="envfarm", error="invalid_token"'
    response = problem_response(
        problem(401, "unauthorized", detail), {"WWW-Authenticate": challenge}
    )
    await response(scope, receive, send)


def _cookie_page(scope: Scope) -> bool:
    path: str = scope["path"]
    page = path in COOKIE_EXACT or any(
        path == prefix or path.startswith(prefix + "/") for prefix in COOKIE_PAGES
    )
    return page and scope.get("method") in SAFE_METHODS


def _browser_page(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    """A browser navigating to a page (it asks for HTML); other clients get the 401."""
    path: str = scope["path"]
    page = any(path == prefix or path.startswith(prefix + "/") for prefix in COOKIE_PAGES)
    html = b"text/html" in headers.get(b"accept", b"")
    return page and html and scope.get("method") in SAFE_METHODS
