"""Read models of the store: a job's row and its view (with its counts), a delivered group,
and what a job's groups hold (the tasks with work left, the failed ones, the trajectories)."""

from __future__ import annotations

import json
from collections.abc import Collection
from operator import itemgetter
from typing import Any, Literal

from sqlalchemy import bindparam, case, func, literal, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from envfarm.errors import JobNotFound
from envfarm.models.jobs import (
    TERMINAL_STATUSES,
    GroupMeta,
    JobCounts,
    JobRequest,
    JobView,
    RawGroup,
    TaskKey,
    redacted,
)
from envfarm.store.schema import (
    attempts,
    consumers,
    episodes,
    groups,
    jobs,
    packed_trajectories,
    trajectories,
)

Forms = Literal["json", "packed", "both"]


def job_row(conn: Connection, job_id: str, *columns: ColumnElement[Any]) -> Any:
    """The job's row, or only ``columns`` of it: its request is as long as its task list, too
    much to read for a page or an acknowledgement of a job of 100,000 tasks."""
    query = select(*columns) if columns else select(jobs)
    row = conn.execute(query.where(jobs.c.id == job_id)).mappings().first()
    if row is None:
        raise JobNotFound(f"no job {job_id!r}", field="job_id")
    return row


FIRST_READ = 4
"""Groups whose trajectories the first query of a page reads; the next reads as many as the
page's byte budget has room for at the size seen so far."""


def _read(forms: Forms) -> Any:
    data, packed = trajectories.c.data, packed_trajectories.c.packed
    if forms == "json":
        columns = [data, literal(None).label("packed")]
    elif forms == "packed":
        columns = [case((packed.is_(None), data), else_=literal("")).label("data"), packed]
    else:
        columns = [data, packed]
    joined = trajectories.join(episodes, episodes.c.id == trajectories.c.episode_id)
    if forms != "json":
        on = packed_trajectories.c.trajectory_id == trajectories.c.trajectory_id
        joined = joined.outerjoin(packed_trajectories, on)
    return (
        select(trajectories.c.group_id, episodes.c.index.label("position"), *columns)
        .select_from(joined)
        .where(trajectories.c.group_id.in_(bindparam("ids", expanding=True)))
    )


_READS = {forms: _read(forms) for forms in ("json", "packed", "both")}
"""Built once: building a statement cost more than SQLite's reading of a group. No ``ORDER
BY``: sorting rows that carry 40 KB texts made SQLite copy them through a sorter that spills
past its cache (a query for 25 groups cost six times one for 4, per trajectory); each group's
few rows are put in episode order here instead."""


def delivered_groups(
    conn: Connection, rows: list[Any], forms: Forms = "both", max_bytes: int | None = None
) -> list[RawGroup]:
    """The groups of these rows (in their order) with their trajectories, stopping after the
    group that brings the trajectories' text past ``max_bytes``. ``forms``: what the answer
    sends. ``json`` reads each trajectory's JSON text alone; ``packed`` reads its packed copy,
    and its JSON text only where there is no copy (the others' JSON text is then ""); ``both``
    reads both. A few queries a page, each for several groups."""
    found: list[RawGroup] = []
    size, at, count = 0, 0, FIRST_READ
    while at < len(rows):
        batch, at = rows[at : at + count], at + count
        texts: dict[str, list[tuple[int, str, str | None]]] = {}
        for row in conn.execute(_READS[forms], {"ids": [group["id"] for group in batch]}):
            texts.setdefault(row.group_id, []).append((row.position, row.data, row.packed))
        for group in batch:
            ordered = sorted(texts.get(group["id"], ()), key=itemgetter(0))
            data = [text for _, text, _ in ordered]
            found.append(RawGroup(_meta(group), data, [copy for _, _, copy in ordered]))
            size += delivered_size(found[-1])
            if max_bytes is not None and size >= max_bytes:
                return found
        if max_bytes is not None:
            count = max(1, -(-(max_bytes - size) * len(found) // max(size, 1)))
    return found


def _meta(group: Any) -> GroupMeta:
    return GroupMeta(
        cursor=group["cursor"],
        group_id=group["id"],
        task_id=group["task_id"],
        dispatch_version=group["dispatch_version"],
        staleness=group["staleness"],
        stale=bool(group["stale"]),
        zero_variance=group["zero_variance"],
    )


def delivered_size(group: RawGroup) -> int:
    """The characters of the trajectories' text read for the answer (a page's budget)."""
    return sum(map(len, group.trajectories)) + sum(len(p or "") for p in group.packed or ())


def job_view(conn: Connection, row: Any) -> JobView:
    job_id = row["id"]
    by_state: dict[str, int] = dict(
        conn.execute(
            select(episodes.c.state, func.count())
            .where(episodes.c.job_id == job_id)
            .group_by(episodes.c.state)
        ).all()
    )
    group_states: dict[str, int] = dict(
        conn.execute(
            select(groups.c.state, func.count())
            .where(groups.c.job_id == job_id)
            .group_by(groups.c.state)
        ).all()
    )
    final = attempts.c.final.is_(True)
    totals = conn.execute(
        select(
            func.count(),
            func.sum(attempts.c.valid.cast(type_=attempts.c.attempt.type)).filter(final),
            func.count().filter(final, attempts.c.valid.is_(False), attempts.c.infrastructure),
            func.avg(attempts.c.reward).filter(final, attempts.c.valid.is_(True)),
        ).where(attempts.c.job_id == job_id)
    ).one()
    acked: dict[str, int] = {
        name: int(cursor)
        for name, cursor in conn.execute(
            select(consumers.c.name, consumers.c.acked).where(consumers.c.job_id == job_id)
        ).all()
    }
    request = JobRequest.model_validate_json(row["request"])
    live_groups = sum(n for state, n in group_states.items() if state != "dropped")
    return JobView(
        id=job_id,
        status=row["status"],
        request=redacted(request),
        counts=JobCounts(
            episodes=sum(n for state, n in by_state.items()),
            queued=by_state.get("queued", 0),
            running=by_state.get("leased", 0),
            completed=by_state.get("done", 0),
            valid=int(totals[1] or 0),
            infra_errors=int(totals[2] or 0),
            attempts=int(totals[0] or 0),
            groups=live_groups,
            groups_completed=group_states.get("completed", 0),
            groups_dropped=group_states.get("dropped", 0),
            groups_acked=max(acked.values(), default=0),
            mean_reward=None if totals[3] is None else float(totals[3]),
        ),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        error=row["error"],
        last_cursor=row["last_cursor"],
        consumers=acked,
    )


def is_terminal(status: str) -> bool:
    return status in TERMINAL_STATUSES


def job_task_hashes(conn: Connection, statuses: Collection[str]) -> dict[str, set[TaskKey]]:
    """For each job in ``statuses``: its tasks that still have work, as (id, content hash)."""
    rows = conn.execute(
        select(groups.c.job_id, groups.c.task_hash, groups.c.task_id)
        .join(jobs, jobs.c.id == groups.c.job_id)
        .where(jobs.c.status.in_(list(statuses)), groups.c.state.in_(("pending", "running")))
        .distinct()
    ).all()
    found: dict[str, set[TaskKey]] = {}
    for row in rows:
        found.setdefault(row.job_id, set()).add(TaskKey(row.task_id, row.task_hash))
    return found


def failed_tasks(conn: Connection, job_id: str) -> dict[str, str]:
    rows = conn.execute(
        select(groups.c.task_id, groups.c.error).where(
            groups.c.job_id == job_id, groups.c.state == "failed"
        )
    ).all()
    return {row.task_id: row.error or "failed" for row in rows}


def all_trajectories(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """Every final trajectory of the job's delivered groups, in cursor order."""
    rows = conn.execute(
        select(trajectories.c.data)
        .join(groups, groups.c.id == trajectories.c.group_id)
        .join(episodes, episodes.c.id == trajectories.c.episode_id)
        .where(trajectories.c.job_id == job_id, groups.c.state == "completed")
        .order_by(groups.c.cursor, episodes.c.index)
    ).all()
    return [json.loads(row.data) for row in rows]
