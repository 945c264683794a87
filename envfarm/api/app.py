"""The REST API for trainers: one FastAPI app around one controller.

The app owns no state of its own: jobs, groups and cursors live in the controller's store, so
several API processes may serve one database. ``create_app`` takes the controller (anything
with the ``JobService`` operations), the bearer token, and the request-body limit.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST

import envfarm
from envfarm.api.browser import install_browser_routes
from envfarm.api.guards import OPEN_PATHS, Guard
from envfarm.api.metrics import Metrics
from envfarm.api.openenv import DEFAULT_IDLE_S
from envfarm.api.openenv import router as openenv_router
from envfarm.api.problems import PROBLEM_CONTENT, Problem, install_problem_handlers
from envfarm.api.routes import router
from envfarm.api.service import JobService
from envfarm.controller.sessions import Sessions

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_KEEPALIVE_S = 15.0

DESCRIPTION = """\
Submit rollout jobs, read graded GRPO groups as they complete, acknowledge them, and publish
the trainer's policy version. Every error is an RFC 9457 problem (`application/problem+json`).
With a token configured, every route but `/healthz` needs `Authorization: Bearer TOKEN`
(browsers: `/ui/login` sets a cookie that opens `/ui` and `/docs` for reading only).
See docs/api.md for cursor, acknowledgement and streaming semantics.
"""


def create_app(
    controller: JobService,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    keepalive_s: float = DEFAULT_KEEPALIVE_S,
    sessions: Sessions | None = None,
    session_idle_s: float = DEFAULT_IDLE_S,
) -> FastAPI:
    """The API app. ``keepalive_s``: seconds between SSE keepalive comments; ``sessions``:
    the step API's (``api/openenv.py``; None: it answers that this server runs no episodes),
    whose sessions are abandoned after ``session_idle_s`` without a message."""
    app = FastAPI(
        title="envfarm",
        version=envfarm.__version__,
        description=DESCRIPTION,
        docs_url=None,  # served with local assets by install_browser_routes
        redoc_url=None,
    )
    app.state.service = controller
    app.state.keepalive_s = keepalive_s
    app.state.sessions, app.state.session_idle_s = sessions, session_idle_s
    registry = Metrics()
    install_problem_handlers(app)
    app.include_router(router)
    app.include_router(openenv_router)

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """Liveness; needs no token."""
        return {"status": "ok"}

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        """Prometheus text format: queue depth, episodes by state, sandbox start seconds,
        policy latency, tokens per second, staleness."""
        text = registry.render(await controller.metrics())
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    install_browser_routes(app, controller, token)
    app.openapi = lambda: _openapi(app, secured=token is not None)  # type: ignore[method-assign]
    app.add_middleware(Guard, token=token, max_body_bytes=max_body_bytes)
    return app


def _openapi(app: FastAPI, *, secured: bool) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}), Problem=problem)
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)  # FastAPI's default 422 shape; ours is a problem
        for operations in schema["paths"].values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    if status.isdigit() and int(status) >= 400:
                        response["content"] = dict(PROBLEM_CONTENT)
                        if status == "422":
                            response["description"] = "Invalid request; `errors` names each field."
        if secured:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
            for path in OPEN_PATHS:
                for operation in schema["paths"].get(path, {}).values():
                    operation["security"] = []
        app.openapi_schema = schema
    return app.openapi_schema
