"""Groups in the store: creation, and completion (advantages, staleness, cursor).

A group completes in the transaction that records its last episode, under a lock on the group
row: advantages are computed once, and the group takes the job's next cursor. Cursors are
taken by incrementing the job row, which holds its lock until commit, so groups commit in
cursor order and a consumer reading ``after=N`` can never skip a group that commits later.
A group that completes too stale for its job is dropped and replaced, or marked (``stale``).
A group that cannot run fails, and the job ends with its last group: ``envfarm.store.job_end``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from envfarm.models.jobs import JobRequest
from envfarm.models.packing import packed_text
from envfarm.models.trajectory import Trajectory
from envfarm.store.schema import (
    episodes,
    groups,
    jobs,
    packed_trajectories,
    trajectories,
)
from envfarm.store.versions import version_seqs

Finalize = Callable[[list[Trajectory], bool], None]
"""Called once per completed group with its final trajectories and the job's leave-one-out."""


MAX_STALE_DROPS = 3
"""After this many drops of one task's groups, a stale group is delivered marked instead: a
trainer that publishes faster than a group completes must not starve the job forever."""


def add_group(
    conn: Connection,
    job_id: str,
    task_id: str,
    task_hash: str,
    request: JobRequest,
    replaces: str | None = None,
) -> str:
    """A group after the job's last one (``ix_groups_job_seq`` finds it)."""
    seq = conn.execute(
        select(func.coalesce(func.max(groups.c.seq), 0)).where(groups.c.job_id == job_id)
    ).scalar()
    first_seq = int(seq or 0) + 1
    tasks = [(task_id, task_hash)]
    return add_groups(conn, job_id, tasks, request, first_seq=first_seq, replaces=replaces)[0]


def add_groups(
    conn: Connection,
    job_id: str,
    tasks: Sequence[tuple[str, str]],
    request: JobRequest,
    *,
    first_seq: int = 1,
    replaces: str | None = None,
) -> list[str]:
    """A group of ``group_size`` queued episodes for each (task id, task hash), numbered from
    ``first_seq``: two inserts for any number of groups. A new job's groups are numbered
    here, not by asking the store for the job's last number once per group, which made a job
    of 100,000 tasks take minutes to create."""
    base_seed = request.sampling.seed
    group_rows: list[dict[str, Any]] = []
    episode_rows: list[dict[str, Any]] = []
    for offset, (task_id, task_hash) in enumerate(tasks):
        group_id, group_seq = f"grp-{uuid.uuid4().hex[:12]}", first_seq + offset
        group_rows.append(
            {"id": group_id, "job_id": job_id, "task_id": task_id, "task_hash": task_hash,
             "seq": group_seq, "state": "pending", "stale": False, "replaces": replaces}
        )  # fmt: skip
        episode_rows.extend(
            {
                "id": f"ep-{uuid.uuid4().hex[:12]}",
                "job_id": job_id,
                "group_id": group_id,
                "task_id": task_id,
                "index": index,
                "seq": group_seq * 10_000 + index,
                "state": "queued",
                "attempt": 0,
                "seed": None if base_seed is None else base_seed + index,
            }
            for index in range(request.group_size)
        )
    if group_rows:
        conn.execute(insert(groups), group_rows)
        conn.execute(insert(episodes), episode_rows)
    return [str(row["id"]) for row in group_rows]


_FINISHED_TRAJECTORY = (
    update(trajectories)
    .where(trajectories.c.trajectory_id == bindparam("b_id"))
    .values(data=bindparam("b_data"))
)
_PACKED_COPY = insert(packed_trajectories).values(
    trajectory_id=bindparam("b_id"), packed=bindparam("b_packed")
)


def complete_group(conn: Connection, group_id: str, finalize: Finalize | None) -> None:
    group = conn.execute(select(groups).where(groups.c.id == group_id)).mappings().one()
    job = (
        conn.execute(
            select(
                jobs.c.id, jobs.c.max_staleness, jobs.c.stale_policy, jobs.c.leave_one_out
            ).where(jobs.c.id == group["job_id"])
        )
        .mappings()
        .one()
    )
    rows = conn.execute(
        select(trajectories.c.trajectory_id, trajectories.c.data)
        .join(episodes, episodes.c.id == trajectories.c.episode_id)
        .where(trajectories.c.group_id == group_id)
        .order_by(episodes.c.index)
    ).all()
    group_trajectories = [Trajectory.model_validate_json(r.data) for r in rows]
    if finalize is not None:
        finalize(group_trajectories, bool(job["leave_one_out"]))
    finished = []
    for trajectory in group_trajectories:
        text = trajectory.to_json()
        finished.append(
            {"b_id": trajectory.trajectory_id, "b_data": text, "b_packed": packed_text(text)}
        )
    if finished:
        conn.execute(_FINISHED_TRAJECTORY, finished)  # one executemany for the whole group
        ids = [row["b_id"] for row in finished]
        conn.execute(
            delete(packed_trajectories).where(packed_trajectories.c.trajectory_id.in_(ids))
        )
        copies = [{"b_id": row["b_id"], "b_packed": row["b_packed"]} for row in finished]
        conn.execute(_PACKED_COPY, copies)
    seqs, current = version_seqs(conn)
    dispatched = group["dispatch_version"]
    staleness = None
    if current is not None and dispatched is not None and dispatched in seqs:
        staleness = max(0, current - seqs[dispatched])
    bound = job["max_staleness"]
    too_stale = bound is not None and staleness is not None and staleness > bound
    zero_variance = next((t.group_zero_variance for t in group_trajectories), None)
    if too_stale and job["stale_policy"] == "drop" and _drops(conn, group) < MAX_STALE_DROPS:
        conn.execute(
            update(groups)
            .where(groups.c.id == group_id)
            .values(state="dropped", staleness=staleness, completed_at=time.time())
        )
        request = JobRequest.model_validate_json(
            conn.execute(select(jobs.c.request).where(jobs.c.id == job["id"])).scalar_one()
        )  # the size of the job's task list: read only for the rare replacement
        add_group(conn, job["id"], group["task_id"], group["task_hash"], request, replaces=group_id)
        return
    cursor = conn.execute(
        update(jobs)
        .where(jobs.c.id == job["id"])
        .values(last_cursor=jobs.c.last_cursor + 1, updated_at=time.time())
        .returning(jobs.c.last_cursor)
    ).scalar_one()
    conn.execute(
        update(groups)
        .where(groups.c.id == group_id)
        .values(
            state="completed",
            cursor=cursor,
            staleness=staleness,
            stale=too_stale,
            zero_variance=zero_variance,
            completed_at=time.time(),
        )
    )


def _drops(conn: Connection, group: Any) -> int:
    """How many groups of this task the job has dropped for staleness already."""
    return int(
        conn.execute(
            select(func.count()).where(
                groups.c.job_id == group["job_id"],
                groups.c.task_id == group["task_id"],
                groups.c.state == "dropped",
            )
        ).scalar()
        or 0
    )
