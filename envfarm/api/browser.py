"""What a browser gets from ``envfarm serve``: the viewer at ``/ui``, Swagger UI at ``/docs``
and ReDoc at ``/redoc`` (their assets served from the ``fastapi-offline`` package, which ships
Swagger UI 5 and so renders OpenAPI 3.1, so they work offline), and ``/ui/login``, which puts
the token in a cookie.

A browser cannot send an ``Authorization`` header when following a link, so ``/ui/login`` (a
form) sets the token as an ``HttpOnly``, ``SameSite=Strict`` cookie. The guard accepts that
cookie only on ``GET``/``HEAD`` requests of ``/ui``, ``/docs``, ``/redoc`` and
``/openapi.json``: every
other request, and every request that changes state, still needs the bearer header, so a page
elsewhere can never make the browser act with the cookie. docs/api.md documents it.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import parse_qs, quote

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from envfarm.api.guards import COOKIE
from envfarm.viewer import JobCatalog, JobReader, create_viewer
from envfarm.viewer.html import e

LOGIN_PATH = "/ui/login"
SAFE_NEXT = ("/ui", "/docs", "/redoc")
MAX_FORM_BYTES = 8192


def install_browser_routes(app: FastAPI, service: JobReader, token: str | None) -> None:
    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount("/docs/assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="envfarm API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="envfarm API",
            redoc_js_url="/docs/assets/redoc.standalone.js",
            redoc_favicon_url="/docs/assets/favicon.png",
            with_google_fonts=False,
        )

    @app.get(LOGIN_PATH, include_in_schema=False)
    async def login_form(request: Request) -> Response:
        if token is None:
            return RedirectResponse(_next(request.query_params.get("next")), 303)
        return _login_page(_next(request.query_params.get("next")))

    @app.post(LOGIN_PATH, include_in_schema=False)
    async def login(request: Request) -> Response:
        body = await request.body()
        form = parse_qs(body[:MAX_FORM_BYTES].decode(errors="replace"))
        target = _next(next(iter(form.get("next") or []), None))
        if token is None:
            return RedirectResponse(target, 303)
        given = (form.get("token") or [""])[0].strip()
        if not secrets.compare_digest(given.encode(), token.encode()):
            return _login_page(target, "that token is wrong", status=401)
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE, quote(token, safe=""), httponly=True, samesite="strict", path="/"
        )
        return response

    @app.get("/ui/logout", include_in_schema=False)
    async def logout() -> Response:
        response = RedirectResponse(LOGIN_PATH, 303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> Response:
        return RedirectResponse("/ui/", 307)

    app.mount("/ui", create_viewer(JobCatalog(service), title="envfarm jobs"), name="ui")


def _next(value: str | None) -> str:
    """Where to go after logging in: a page of ``/ui`` or ``/docs`` only (no open redirect)."""
    if value and value.startswith(SAFE_NEXT) and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/"


def _login_page(target: str, problem: str = "", status: int = 200) -> HTMLResponse:
    message = f'<p class="invalid">{e(problem)}</p>' if problem else ""
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>log in · envfarm</title>"
        '<link rel="stylesheet" href="/ui/static/viewer.css"></head><body><main>'
        "<h1>envfarm</h1>"
        f'<form class="login" method="post" action="{LOGIN_PATH}">{message}'
        "<label>API token <input type=password name=token autocomplete=current-password "
        "autofocus required></label>"
        f'<input type=hidden name=next value="{e(target)}">'
        "<button type=submit>log in</button>"
        '<p class="muted">The token is kept in an HttpOnly cookie that opens the pages of /ui '
        "and /docs only; API calls still need the Authorization header.</p></form>"
        "</main></body></html>"
    )
    headers = {
        "Content-Security-Policy": "default-src 'none'; style-src 'self'; form-action 'self'"
    }
    return HTMLResponse(html, status_code=status, headers=headers)
