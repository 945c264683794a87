"""A job's row from its submission through the status changes asked of it.

A job is stored with its request (API keys in clear: the workers need them; clients only ever
see it redacted, ``envfarm.models.jobs.JobView``) and all its groups, in one transaction. Its
user may pause, resume or cancel it; a change to the status it already has answers its view
unchanged, and one its status does not allow is refused. Leasing its first episode makes a
queued job ``running``; ``envfarm.store.job_end`` ends it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from envfarm.errors import InvalidJobState
from envfarm.models.jobs import JobAction, JobRequest, JobStatus, JobView
from envfarm.store.groups import add_groups
from envfarm.store.schema import jobs
from envfarm.store.views import job_row, job_view

TRANSITIONS: dict[JobAction, tuple[tuple[JobStatus, ...], JobStatus]] = {
    "pause": (("queued", "running"), "paused"),
    "resume": (("paused",), "running"),
    "cancel": (("queued", "running", "paused"), "cancelled"),
}
"""Per action: the statuses it applies to, and the status it leaves."""


def request_json(request: JobRequest) -> str:
    """The request with its API keys in clear: the workers need them; clients never see it."""
    data = request.model_dump(mode="json")
    policy = data["policy"]
    if request.policy.api_key is not None:
        policy["api_key"] = request.policy.api_key.get_secret_value()
    for raw, endpoint in zip(policy["endpoints"], request.policy.endpoints, strict=True):
        if endpoint.api_key is not None:
            raw["api_key"] = endpoint.api_key.get_secret_value()
    if request.judge is not None and request.judge.api_key is not None:
        data["judge"]["api_key"] = request.judge.api_key.get_secret_value()
    return json.dumps(data)


def create(conn: Connection, job_id: str, request: JobRequest, task_hashes: dict[str, str]) -> str:
    """The job's row and its groups (``task_hashes``: each task's content hash)."""
    now = time.time()
    conn.execute(
        insert(jobs).values(
            id=job_id,
            name=request.name,
            status="queued",
            priority=request.priority,
            concurrency=request.concurrency,
            max_staleness=request.max_staleness,
            stale_policy=request.stale_policy,
            max_retries=request.max_retries,
            leave_one_out=request.leave_one_out,
            request=request_json(request),
            last_cursor=0,
            created_at=now,
            updated_at=now,
        )
    )
    tasks = [(task_id, task_hashes[task_id]) for task_id in request.tasks]
    add_groups(conn, job_id, tasks, request)
    return job_id


def transition(conn: Connection, job_id: str, action: JobAction) -> JobView:
    allowed, target = TRANSITIONS[action]
    row = job_row(conn, job_id)
    if row["status"] == target:
        return job_view(conn, row)
    if row["status"] not in allowed:
        raise InvalidJobState(f"job {job_id} is {row['status']}: cannot {action} it")
    conn.execute(
        update(jobs).where(jobs.c.id == job_id).values(status=target, updated_at=time.time())
    )
    return job_view(conn, job_row(conn, job_id))


def statuses(conn: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    rows = conn.execute(select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids)))
    return {row.id: row.status for row in rows}


def mark_running(conn: Connection, job_ids: Collection[str]) -> None:
    """Jobs that had an episode leased are ``running`` (kept out of ``lease``'s transaction,
    which would otherwise take the job row's lock before a group's)."""
    conn.execute(
        update(jobs)
        .where(jobs.c.id.in_(list(job_ids)), jobs.c.status == "queued")
        .values(status="running", updated_at=time.time())
    )
