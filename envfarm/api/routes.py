"""The ``/v1`` routes: parse the request, make one call to the controller, render the answer.

Shapes and names are fixed (docs/design.md, "Fixed interfaces"); docs/api.md describes them for
trainers. The groups route answers JSON (long-poll) or, with ``Accept: text/event-stream``,
a stream of server-sent events.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from envfarm.api.chunked import ChunkedResponse
from envfarm.api.encodings import (
    ARROW,
    JSON,
    SSE,
    Compressor,
    encode_page,
    negotiate,
    page_json_chunks,
    spans_header,
)
from envfarm.api.problems import (
    FieldError,
    ProblemError,
    problem,
    problem_responses,
)
from envfarm.api.service import JobService
from envfarm.api.stream import SSE_MEDIA_TYPE, group_events
from envfarm.models.jobs import GroupPage, JobRequest, JobView, TaskInfo

MAX_WAIT_S = 300.0
MAX_LIMIT = 1000
CONSUMER_PATTERN = r"^[A-Za-z0-9_.:@-]{1,128}$"
NEXT_CURSOR = "Envfarm-Next-Cursor"
GROUP_SPANS = "Envfarm-Group-Spans"
JOB_ENDED = "Envfarm-Job-Ended"
MAX_SPANS = 200  # a header line stays far below the 8 KB clients accept


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobCreated(Body):
    id: str


class JobList(Body):
    jobs: list[JobView]


class TaskList(Body):
    tasks: list[TaskInfo]


class Ack(Body):
    cursor: int = Field(ge=0, description="Acknowledge this group and every one before it.")
    consumer: str = Field(default="default", pattern=CONSUMER_PATTERN)


class PolicyVersion(Body):
    version: str = Field(min_length=1, max_length=200)


async def _service(request: Request) -> JobService:
    """The app's service. A coroutine, since FastAPI runs a plain function dependency on its
    thread pool: a thread hop on every request (0.06-0.14 ms of a 0.3-0.4 ms `GET /v1/tasks`)."""
    service: JobService = request.app.state.service
    return service


Service = Annotated[JobService, Depends(_service)]
JobId = Annotated[str, Path(description="The id `POST /v1/jobs` returned.")]

router = APIRouter(prefix="/v1", responses=problem_responses(401))


@router.post("/jobs", status_code=201, tags=["jobs"], responses=problem_responses(413, 422))
async def submit_job(body: JobRequest, service: Service, response: Response) -> JobCreated:
    """Submit a rollout job: `group_size` episodes of each task, graded and grouped.

    API keys in `policy` are kept for the workers and never returned by any route."""
    job_id = await service.submit(body)
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    return JobCreated(id=job_id)


@router.get("/jobs", tags=["jobs"])
async def list_jobs(service: Service) -> JobList:
    """Every job, newest first, with status and live counts."""
    return JobList(jobs=await service.jobs())


@router.get("/jobs/{job_id}", tags=["jobs"], responses=problem_responses(404))
async def get_job(job_id: JobId, service: Service) -> JobView:
    """A job's status (`queued`, `running`, `paused`, `completed`, `cancelled`, `failed`),
    live counts and the cursor of its newest completed group."""
    return await service.job(job_id)


@router.post("/jobs/{job_id}/pause", tags=["jobs"], responses=problem_responses(404, 409))
async def pause_job(job_id: JobId, service: Service) -> JobView:
    """Stop starting episodes of this job; running ones finish and are delivered."""
    return await service.pause(job_id)


@router.post("/jobs/{job_id}/resume", tags=["jobs"], responses=problem_responses(404, 409))
async def resume_job(job_id: JobId, service: Service) -> JobView:
    """Start episodes of a paused job again."""
    return await service.resume(job_id)


@router.post("/jobs/{job_id}/cancel", tags=["jobs"], responses=problem_responses(404, 409))
async def cancel_job(job_id: JobId, service: Service) -> JobView:
    """End the job: no more episodes start, running ones are stopped. Groups completed before
    remain readable."""
    return await service.cancel(job_id)


GROUPS_RESPONSES = {
    200: {
        "description": "A page of completed groups (JSON), or with `Accept: text/event-stream` "
        "a stream of `group` events (`id` = cursor) ending with one `end` event.",
        "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
    },
    **problem_responses(404, 422),
}


@router.get(
    "/jobs/{job_id}/groups",
    tags=["delivery"],
    response_model=GroupPage,
    responses=GROUPS_RESPONSES,
)
async def job_groups(
    request: Request,
    job_id: JobId,
    service: Service,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            description="Return groups with a cursor above this one. Without it: "
            "after the consumer's last acknowledged cursor.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many groups.")] = 100,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            description="Seconds to wait for a first group when none "
            "is ready (long-poll); 0 answers at once.",
        ),
    ] = 0.0,
    consumer: Annotated[
        str, Query(pattern=CONSUMER_PATTERN, description="Independent consumer name.")
    ] = "default",
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    accept_encoding: Annotated[str | None, Header(include_in_schema=False)] = None,
    last_event_id: Annotated[
        str | None, Header(description="SSE only: resume after this cursor.")
    ] = None,
) -> Response:
    """Completed groups in cursor order, each with its trajectories. Delivery is at least once
    until acknowledged: pass `after` to page forward, and acknowledge with `POST .../ack`."""
    encoding = negotiate(accept)
    compressor = Compressor(accept_encoding)
    headers = {"Content-Encoding": compressor.name} if compressor.name else {}
    headers["Vary"] = "Accept, Accept-Encoding"
    if encoding.media_type != SSE:
        page = await service.groups(
            job_id, after=after, limit=limit, wait_s=wait, consumer=consumer,
            packed=encoding.packed or encoding.media_type == ARROW,
        )  # fmt: skip
        if page.groups:  # a client may ask for the next page before it parses this one
            headers[NEXT_CURSOR] = str(page.groups[-1].cursor)
        if page.ended:  # nor need it ask for another page at all
            headers[JOB_ENDED] = "true"
        if encoding.media_type != JSON:
            body = compressor.whole(encode_page(page, encoding))
            return Response(body, media_type=encoding.content_type, headers=headers)
        chunks, spans = page_json_chunks(page, encoding.packed)
        if spans and len(spans) <= MAX_SPANS:
            headers[GROUP_SPANS] = spans_header(spans)
        if compressor.name:
            body = compressor.whole(b"".join(chunks))
            return Response(body, media_type=encoding.content_type, headers=headers)
        return ChunkedResponse(chunks, media_type=encoding.content_type, headers=headers)
    if last_event_id:
        if not last_event_id.strip().isdigit():
            message = "must be a group cursor (an integer)"
            error = FieldError(field="Last-Event-ID", message=message)
            raise ProblemError(problem(422, "validation", f"Last-Event-ID {message}", [error]))
        after = int(last_event_id)
    await service.job(job_id)  # an unknown job is a 404 before the stream starts
    events = group_events(
        service,
        job_id,
        after=after,
        consumer=consumer,
        limit=limit,
        keepalive_s=request.app.state.keepalive_s,
        packed=encoding.packed,
        compressor=compressor,
    )
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type=encoding.content_type, headers=headers)


@router.post(
    "/jobs/{job_id}/ack", status_code=204, tags=["delivery"], responses=problem_responses(404, 422)
)
async def ack_groups(job_id: JobId, body: Ack, service: Service) -> None:
    """Acknowledge the group with this cursor and every one before it, for this consumer.
    Reading without `after` then starts after it, across server restarts."""
    await service.ack(job_id, body.cursor, body.consumer)


@router.put("/policy-version", status_code=204, tags=["trainer"], responses=problem_responses(422))
async def put_policy_version(body: PolicyVersion, service: Service) -> None:
    """Publish the trainer's current policy version; jobs with `max_staleness` bound how far
    behind it a delivered group's dispatch version may be."""
    await service.publish_version(body.version)


@router.get("/tasks", tags=["trainer"])
async def list_tasks(service: Service) -> TaskList:
    """The tasks this server can run: ids to use in `POST /v1/jobs`."""
    return TaskList(tasks=service.tasks())
