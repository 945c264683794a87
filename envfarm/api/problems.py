"""One error format for every failure: RFC 9457 problem details (``application/problem+json``).

Every error response carries ``type`` (a ``urn:envfarm:problem:<slug>`` URI naming the kind of
problem), ``title`` (the same for every problem of a type), ``status`` and ``detail`` (this
occurrence). Validation problems (422) add ``errors: [{field, message}]``, where ``field`` is the
path into the request as a trainer would write it: ``tasks[0]``, ``policy.base_url``, or the
name of a query parameter or header. Foreign exceptions are translated here, once; an
unexpected one becomes a 500 whose detail reveals nothing of the request (API keys included).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

from envfarm.errors import EnvfarmError, InvalidJobState, JobError, JobNotFound, UnknownTask

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"

TITLES: dict[str, str] = {
    "unauthorized": "Missing or wrong bearer token",
    "not-found": "No such resource",
    "job-not-found": "No such job",
    "method-not-allowed": "Method not allowed on this resource",
    "not-acceptable": "Cannot produce the requested media type",
    "invalid-job-state": "The job's status does not allow this action",
    "body-too-large": "Request body too large",
    "validation": "The request is not valid",
    "unknown-task": "The job names a task this server does not know",
    "internal": "Internal server error",
    "unavailable": "Service unavailable",
}
SLUG_OF_STATUS = {
    401: "unauthorized",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "invalid-job-state",
    413: "body-too-large",
    422: "validation",
    503: "unavailable",
}


class FieldError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: str
    """Path into the request: ``tasks[0]``, ``policy.base_url``, a query parameter's name."""
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem: the body of every error response."""

    model_config = ConfigDict(extra="forbid")

    type: str
    """``urn:envfarm:problem:<slug>``; see docs/api.md for the list."""
    title: str
    status: int
    detail: str | None = None
    errors: list[FieldError] | None = None
    """Only on 422: each invalid field and what was expected."""


def problem(
    status: int, slug: str, detail: str | None = None, errors: Sequence[FieldError] | None = None
) -> Problem:
    return Problem(
        type=f"urn:envfarm:problem:{slug}",
        title=TITLES.get(slug, slug),
        status=status,
        detail=detail,
        errors=list(errors) if errors is not None else None,
    )


class ProblemError(Exception):
    """Raised by a route to answer with this problem."""

    def __init__(self, item: Problem, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(item.detail or item.title)
        self.problem = item
        self.headers = dict(headers or {})


def problem_response(item: Problem, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        item.model_dump(mode="json", exclude_none=True),
        status_code=item.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers or {}),
    )


def field_name(loc: Iterable[int | str]) -> str:
    """``("body", "tasks", 0)`` -> ``tasks[0]``; ``("query", "limit")`` -> ``limit``."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        source = parts.pop(0)
        if not parts:
            return str(source)
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part.startswith("function-"):
            continue
        else:
            name += f".{part}" if name else part
    return name or "body"


def _message(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        ctx = error.get("ctx") or {}
        return f"the body is not valid JSON ({ctx.get('error', message)})"
    return message.removeprefix("Value error, ")


def validation_problem(errors: Sequence[Mapping[str, Any]]) -> Problem:
    fields = [
        FieldError(
            field="body" if e.get("type") == "json_invalid" else field_name(e.get("loc", ())),
            message=_message(e),
        )
        for e in errors
    ]
    detail = "; ".join(f"{f.field}: {f.message}" for f in fields)
    return problem(422, "validation", detail, fields)


def job_error_problem(exc: JobError, slug: str) -> Problem:
    """A request the controller refused (an unknown task, a bad policy): 422 naming the field."""
    field = exc.field or "body"
    return problem(422, slug, str(exc), [FieldError(field=field, message=str(exc))])


def install_problem_handlers(app: FastAPI) -> None:
    """Render every error the app can raise as a problem."""

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(validation_problem(exc.errors()))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        slug = SLUG_OF_STATUS.get(exc.status_code, "internal")
        detail = exc.detail if isinstance(exc.detail, str) else None
        return problem_response(problem(exc.status_code, slug, detail), exc.headers)

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ProblemError)
        return problem_response(exc.problem, exc.headers)

    async def on_job_not_found(_: Request, exc: Exception) -> JSONResponse:
        return problem_response(problem(404, "job-not-found", str(exc)))

    async def on_job_state(_: Request, exc: Exception) -> JSONResponse:
        return problem_response(problem(409, "invalid-job-state", str(exc)))

    async def on_unknown_task(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, UnknownTask)
        return problem_response(job_error_problem(exc, "unknown-task"))

    async def on_job_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, JobError)
        return problem_response(job_error_problem(exc, "validation"))

    async def on_envfarm(_: Request, exc: Exception) -> JSONResponse:
        log.error("request failed: %s", exc)
        retryable = isinstance(exc, EnvfarmError) and exc.retryable
        status, slug = (503, "unavailable") if retryable else (500, "internal")
        return problem_response(problem(status, slug, str(exc)))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error while serving a request", exc_info=exc)
        return problem_response(problem(500, "internal", "unexpected error; see the server log"))

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(JobNotFound, on_job_not_found)
    app.add_exception_handler(InvalidJobState, on_job_state)
    app.add_exception_handler(UnknownTask, on_unknown_task)
    app.add_exception_handler(JobError, on_job_error)
    app.add_exception_handler(EnvfarmError, on_envfarm)
    app.add_exception_handler(Exception, on_unexpected)


PROBLEM_CONTENT = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the problems a route may answer with."""
    descriptions = {
        401: "Missing or wrong bearer token (when the server has one).",
        404: "No job with this id.",
        409: "The job's status does not allow this action.",
        413: "The request body is larger than the server's limit.",
        422: "Invalid request; `errors` names each field.",
    }
    return {
        s: {"model": Problem, "description": descriptions[s], "content": PROBLEM_CONTENT}
        for s in statuses
    }
