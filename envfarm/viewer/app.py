"""The viewer as an ASGI app: ``envfarm view`` serves it at ``/``, ``envfarm serve`` under
``/ui``. It is read-only: every route is a GET; links are built from the mount point.

Pages are rendered on request from the runs' indexes (each request first indexes what a run
appended since the last one), so a page costs what it shows, not what the run holds. Every page
is sent with a Content-Security-Policy that allows no script at all and only the package's own
stylesheet: what a model wrote cannot run in the reader's browser.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from envfarm.viewer.html import e, layout
from envfarm.viewer.pages.group import group_page
from envfarm.viewer.pages.run import run_page
from envfarm.viewer.pages.runs import runs_page
from envfarm.viewer.pages.trajectory import trajectory_page
from envfarm.viewer.sources import Catalog, UnknownRun
from envfarm.viewer.stats import Filters

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
MAX_REFRESH_S = 3600


def static_dir() -> str:
    return str(resources.files("envfarm.viewer") / "static")


def create_viewer(catalog: Catalog, *, title: str = "envfarm runs") -> Starlette:
    async def home(request: Request) -> Response:
        return _page(runs_page(_base(request), await catalog.runs(), title=title))

    async def run(request: Request) -> Response:
        found = await _run(catalog, request)
        params = request.query_params
        filters = Filters(
            flagged=_flag(params.get("flagged")),
            invalid=_flag(params.get("invalid")),
            zero_variance=_flag(params.get("zero_variance")),
            task=params.get("task") or None,
            outcome=params.get("outcome") or None,
            group=params.get("group") or None,
        )
        page = _int(params.get("page"), 1)
        refresh = _int(params.get("refresh"), 0) or None
        if refresh is not None:
            refresh = min(max(refresh, 1), MAX_REFRESH_S)
        return _page(run_page(_base(request), found, filters, page, refresh))

    async def group(request: Request) -> Response:
        found = await _run(catalog, request)
        group_id = request.path_params["group_id"]
        members = [x for x in found.entries if x.group_id == group_id]
        if not members:
            raise HTTPException(404, f"no group {group_id} in {found.name}")
        return _page(group_page(_base(request), found, group_id, members))

    async def trajectory(request: Request) -> Response:
        found = await _run(catalog, request)
        wanted = request.path_params["trajectory_id"]
        entry = next((x for x in found.entries if x.trajectory_id == wanted), None)
        if entry is None:
            raise HTTPException(404, f"no trajectory {wanted} in {found.name}")
        try:
            document = await found.load(entry)
        except (UnknownRun, ValueError, OSError) as exc:
            raise HTTPException(404, str(exc)) from exc
        return _page(trajectory_page(_base(request), found, document))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        body = f'<p class="invalid">{e(detail)}</p>'
        return _page(layout(_base(request), f"{status}", body), status)

    app = Starlette(
        routes=[
            Route("/", home),
            Route("/runs/{run_key}", run),
            Route("/runs/{run_key}/groups/{group_id}", group),
            Route("/runs/{run_key}/t/{trajectory_id}", trajectory),
        ],
        exception_handlers={HTTPException: not_found},
    )
    app.mount("/static", StaticFiles(directory=static_dir()), name="static")
    return app


async def _run(catalog: Catalog, request: Request) -> Any:
    try:
        return await catalog.run(request.path_params["run_key"])
    except UnknownRun as exc:
        raise HTTPException(404, str(exc)) from exc


def _page(html: str, status: int = 200) -> HTMLResponse:
    headers = {
        "Content-Security-Policy": CSP,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return HTMLResponse(html, status_code=status, headers=headers)


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _flag(value: str | None) -> bool:
    return value not in (None, "", "0", "false")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default
