"""Recording attempts: a result counts only from the worker that still holds the lease.

A worker whose lease expired (it stalled, or died and was reclaimed) has its late result
discarded, and the expiry itself is recorded as an infrastructure attempt (``WorkerLost``),
retried like any other. Locks are always taken group row first, then episode row, then job
row, so concurrent recorders cannot deadlock.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

import envfarm
from envfarm.models.trajectory import ErrorInfo, Provenance, Reward, Trajectory
from envfarm.store.groups import Finalize, complete_group
from envfarm.store.job_end import finish_job_if_done
from envfarm.store.schema import attempts, episodes, groups, jobs, trajectories


@dataclass(frozen=True)
class Recorded:
    status: Literal["retry", "final", "lost"]
    group_completed: bool = False
    job_completed: bool = False


def lock_groups(conn: Connection, group_ids: Collection[str]) -> None:
    """Lock a batch's groups first (PostgreSQL), in one order every worker follows, and only
    then (completing a group) the job's row: two batches sharing groups cannot each hold a lock
    the other waits for."""
    conn.execute(
        select(groups.c.id)
        .where(groups.c.id.in_(sorted(group_ids)))
        .order_by(groups.c.id)
        .with_for_update()
    ).all()


def expire_leases_of(conn: Connection, worker_ids: Collection[str]) -> None:
    """Make the leases of workers known to be dead expire now (``expire_one`` records them)."""
    conn.execute(
        update(episodes)
        .where(episodes.c.lease_owner.in_(list(worker_ids)), episodes.c.state == "leased")
        .values(lease_expires=0.0)
    )


def expired(conn: Connection, now: float) -> list[str]:
    """Episodes whose lease has expired, to be handled one per transaction."""
    return list(
        conn.execute(
            select(episodes.c.id)
            .where(episodes.c.state == "leased", episodes.c.lease_expires < now)
            .order_by(episodes.c.group_id, episodes.c.id)
        ).scalars()
    )


def expire_one(conn: Connection, episode_id: str, now: float, finalize: Finalize | None) -> None:
    """Record an expired lease as a lost attempt; requeue the episode, or end it after its
    retries. One per transaction, group row locked first, like ``record``."""
    group_id = conn.execute(
        select(episodes.c.group_id).where(episodes.c.id == episode_id)
    ).scalar_one()
    conn.execute(select(groups.c.id).where(groups.c.id == group_id).with_for_update())
    row = (
        conn.execute(
            select(episodes, jobs.c.max_retries, groups.c.task_hash)
            .join(jobs, jobs.c.id == episodes.c.job_id)
            .join(groups, groups.c.id == episodes.c.group_id)
            .where(
                episodes.c.id == episode_id,
                episodes.c.state == "leased",
                episodes.c.lease_expires < now,
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return
    conn.execute(update(episodes).where(episodes.c.id == episode_id).values(lease_expires=None))
    final = row["attempt"] >= row["max_retries"]
    _record(conn, row, _lost_trajectory(row), final, row["lease_owner"], finalize)


def _lost_trajectory(row: Any) -> Trajectory:
    message = (
        f"the controller running this episode ({row['lease_owner']}) stopped renewing its "
        "lease (it died or stalled)"
    )
    return Trajectory(
        trajectory_id=f"{row['id']}-a{row['attempt']}",
        episode_id=row["id"],
        job_id=row["job_id"],
        group_id=row["group_id"],
        task_id=row["task_id"],
        attempt=row["attempt"],
        reward=Reward(reason=message),
        error=ErrorInfo(
            type="WorkerLost", message=message, phase="agent", infrastructure=True, retryable=True
        ),
        provenance=Provenance(
            task_hash=row["task_hash"], envfarm_version=envfarm.__version__, seed=row["seed"]
        ),
    )


# The statements of recording a result, built once: at thousands of results a second,
# building and cache-keying SQLAlchemy statements per call cost more than executing them.
_GROUP_LOCKED = select(groups.c.id).where(groups.c.id == bindparam("b_group")).with_for_update()
_LEASED_EPISODE = (
    select(episodes, jobs.c.max_retries)
    .join(jobs, jobs.c.id == episodes.c.job_id)
    .where(
        episodes.c.id == bindparam("b_episode"),
        episodes.c.state == "leased",
        episodes.c.lease_owner == bindparam("b_worker"),
        episodes.c.attempt == bindparam("b_attempt"),
    )
)
_INSERT_ATTEMPT = insert(attempts)
_INSERT_TRAJECTORY = insert(trajectories)
_REQUEUE = (
    update(episodes)
    .where(episodes.c.id == bindparam("b_episode"))
    .values(state="queued", attempt=bindparam("b_attempt"), lease_owner=None, lease_expires=None)
)
_DONE = (
    update(episodes)
    .where(episodes.c.id == bindparam("b_episode"))
    .values(
        state="done",
        lease_owner=None,
        lease_expires=None,
        trajectory_id=bindparam("b_trajectory"),
    )
)
_OPEN_IN_GROUP = select(func.count()).where(
    episodes.c.group_id == bindparam("b_group"), episodes.c.state != "done"
)


def record(
    conn: Connection,
    worker: str,
    trajectory: Trajectory,
    final: bool,
    finalize: Finalize | None,
) -> Recorded:
    """Store one attempt's result if ``worker`` still holds the episode's lease."""
    group = conn.execute(_GROUP_LOCKED, {"b_group": trajectory.group_id}).first()
    row = (
        conn.execute(
            _LEASED_EPISODE,
            {
                "b_episode": trajectory.episode_id,
                "b_worker": worker,
                "b_attempt": trajectory.attempt,
            },
        )
        .mappings()
        .first()
    )
    if row is None or group is None:
        return Recorded("lost")
    return _record(conn, row, trajectory, final, worker, finalize)


def _record(
    conn: Connection,
    row: Any,
    trajectory: Trajectory,
    final: bool,
    worker: str | None,
    finalize: Finalize | None,
) -> Recorded:
    error = trajectory.error
    data = trajectory.to_json()
    conn.execute(
        _INSERT_ATTEMPT,
        {
            "trajectory_id": trajectory.trajectory_id,
            "episode_id": row["id"],
            "job_id": row["job_id"],
            "attempt": trajectory.attempt,
            "worker": worker,
            "ended_at": time.time(),
            "final": final,
            "valid": trajectory.reward.valid,
            "reward": trajectory.reward.value,
            "error_type": error.type if error else None,
            "error_message": error.message if error else None,
            "infrastructure": bool(error and error.infrastructure),
            "trajectory": None if final else data,
        },
    )
    if not final:
        conn.execute(_REQUEUE, {"b_episode": row["id"], "b_attempt": row["attempt"] + 1})
        return Recorded("retry")
    conn.execute(
        _INSERT_TRAJECTORY,
        {
            "trajectory_id": trajectory.trajectory_id,
            "episode_id": row["id"],
            "group_id": row["group_id"],
            "job_id": row["job_id"],
            "data": data,
        },
    )
    conn.execute(_DONE, {"b_episode": row["id"], "b_trajectory": trajectory.trajectory_id})
    open_episodes = conn.execute(_OPEN_IN_GROUP, {"b_group": row["group_id"]}).scalar()
    if open_episodes:
        return Recorded("final")
    complete_group(conn, row["group_id"], finalize)
    return Recorded(
        "final", group_completed=True, job_completed=finish_job_if_done(conn, row["job_id"])
    )
