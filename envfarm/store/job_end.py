"""How a job ends: when its last open group ends, and when a task's input cannot run at all.

A job ends once none of its groups is pending or running: ``completed`` when at least one group
completed, else ``failed``. The transaction that ends a group asks, under the job row's lock,
whether one is left open, so of two transactions ending a job's last two groups exactly one
ends the job. A task whose input is bad (its image cannot be built) fails its open groups at
once, without retries, which may end the job the same way.
"""

from __future__ import annotations

import time

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from envfarm.store.schema import episodes, groups, jobs


def finish_job_if_done(conn: Connection, job_id: str) -> bool:
    # The job row's lock first: two transactions ending the job's last two groups at once
    # (record and fail_task) must not both count the other's group as still open.
    conn.execute(select(jobs.c.id).where(jobs.c.id == job_id).with_for_update())
    # Whether one group is left, not how many: counting them read every open group of the
    # job at each group's end (5 ms a group in a job of 100,000 tasks, and quadratic in it).
    if _any_group(conn, job_id, ("pending", "running")):
        return False
    completed = _any_group(conn, job_id, ("completed",))
    status = "completed" if completed else "failed"
    done = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status.in_(("queued", "running", "paused")))
        .values(
            status=status,
            updated_at=time.time(),
            error=None if completed else "no group of this job could run",
        )
    )
    return done.rowcount == 1


def _any_group(conn: Connection, job_id: str, states: tuple[str, ...]) -> bool:
    found = conn.execute(
        select(groups.c.id).where(groups.c.job_id == job_id, groups.c.state.in_(states)).limit(1)
    ).first()
    return found is not None


def fail_task(conn: Connection, job_id: str, task_hash: str, message: str) -> bool:
    """The task's input is bad (its image cannot be built): its groups fail, not retried."""
    open_groups = (
        conn.execute(
            select(groups.c.id).where(
                groups.c.job_id == job_id,
                groups.c.task_hash == task_hash,
                groups.c.state.in_(("pending", "running")),
            )
        )
        .scalars()
        .all()
    )
    if not open_groups:
        return False
    conn.execute(
        update(groups)
        .where(groups.c.id.in_(open_groups), groups.c.state.in_(("pending", "running")))
        .values(state="failed", error=message, completed_at=time.time())
    )
    conn.execute(
        update(episodes)
        .where(episodes.c.group_id.in_(open_groups), episodes.c.state != "done")
        .values(state="done", lease_owner=None, lease_expires=None)
    )
    return finish_job_if_done(conn, job_id)
