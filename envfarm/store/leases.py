"""Leasing episodes: who runs what, exactly once.

An episode is ``queued``, ``leased`` (a worker runs it until ``lease_expires``; the worker
renews the lease while it runs) or ``done``. Leasing is a compare-and-set on the episode row,
after a ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite's ``BEGIN IMMEDIATE``
serializes writers instead), so no two controllers ever run the same attempt. Slots go to the
highest priority first, then to the job with the fewest episodes running (fair share), within
each job's own concurrency limit; a job with ``max_staleness`` starts no new group while one of
its groups in flight is a publication away from being too stale.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Connection

from envfarm.store.schema import episodes, groups, jobs
from envfarm.store.versions import version_seqs


@dataclass(frozen=True)
class Lease:
    episode_id: str
    job_id: str
    group_id: str
    task_id: str
    task_hash: str
    index: int
    attempt: int
    seed: int | None
    dispatch_version: str | None


_JOB_COLUMNS = [column for column in jobs.c if column.name != "request"]
"""A job's row without its request, which is as long as its task list."""


def lease(
    conn: Connection,
    worker: str,
    slots: int,
    lease_s: float,
    ready: Collection[str],
    postgres: bool,
) -> list[Lease]:
    """Up to ``slots`` episodes for ``worker``: priority first, then the job with the fewest
    episodes running, only tasks whose image ``ready`` names (by content hash)."""
    now = time.time()
    if slots <= 0 or not ready:
        return []
    active = (
        conn.execute(
            select(*_JOB_COLUMNS)
            .where(jobs.c.status.in_(("queued", "running")))
            .order_by(jobs.c.priority.desc(), jobs.c.created_at)
        )
        .mappings()
        .all()
    )
    if not active:
        return []
    running: dict[str, int] = dict(
        conn.execute(
            select(episodes.c.job_id, func.count())
            .where(episodes.c.state == "leased")
            .group_by(episodes.c.job_id)
        ).all()
    )
    seqs, current = version_seqs(conn)
    leases: list[Lease] = []
    for priority in sorted({job["priority"] for job in active}, reverse=True):
        tier = [job for job in active if job["priority"] == priority]
        room = {job["id"]: _room(conn, job, running, slots, postgres) for job in tier}
        picked = {
            job["id"]: _candidates(conn, job, room[job["id"]], ready, seqs, current, postgres)
            for job in tier
        }
        while len(leases) < slots:
            open_jobs = [j for j in tier if picked[j["id"]] and room[j["id"]] > 0]
            if not open_jobs:
                break
            job = min(open_jobs, key=lambda j: running.get(j["id"], 0))
            candidate = picked[job["id"]].pop(0)
            taken = _take(conn, candidate, worker, now + lease_s, job, current, seqs)
            if taken is not None:
                leases.append(taken)
                running[job["id"]] = running.get(job["id"], 0) + 1
                room[job["id"]] -= 1
        if len(leases) >= slots:
            break
    return leases


def _room(conn: Connection, job: Any, running: dict[str, int], slots: int, postgres: bool) -> int:
    """Free slots of the job. On PostgreSQL a job with a limit is counted under an advisory
    lock (taken in the same job order by every leaser), or two leasers could both see room."""
    limit = job["concurrency"]
    if limit is None:
        return slots
    if postgres:
        conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(job["id"]))))
        running[job["id"]] = int(
            conn.execute(
                select(func.count()).where(
                    episodes.c.job_id == job["id"], episodes.c.state == "leased"
                )
            ).scalar()
            or 0
        )
    return max(0, min(slots, int(limit) - running.get(job["id"], 0)))


def _candidates(
    conn: Connection,
    job: Any,
    room: int,
    ready: Collection[str],
    seqs: dict[str, int],
    current: int | None,
    postgres: bool,
) -> list[Any]:
    if room <= 0 or not _has_ready_group(conn, job["id"], ready):
        return []
    query = (
        select(episodes.c.id, episodes.c.group_id, groups.c.state.label("group_state"))
        .join(groups, groups.c.id == episodes.c.group_id)
        .where(
            episodes.c.job_id == job["id"],
            episodes.c.state == "queued",
            groups.c.task_hash.in_(list(ready)),
        )
        .order_by(episodes.c.seq)
        .limit(room)
    )
    if _staleness_gate_closed(conn, job, seqs, current):
        query = query.where(groups.c.state == "running")
    if postgres:
        query = query.with_for_update(skip_locked=True, of=episodes)
    return list(conn.execute(query).mappings().all())


def _has_ready_group(conn: Connection, job_id: str, ready: Collection[str]) -> bool:
    """Whether an open group of the job has its image ready (from the groups' index: without
    it, a job whose images are still building would have every queued episode scanned)."""
    found = conn.execute(
        select(groups.c.id)
        .where(
            groups.c.job_id == job_id,
            groups.c.state.in_(("pending", "running")),
            groups.c.task_hash.in_(list(ready)),
        )
        .limit(1)
    ).first()
    return found is not None


def _staleness_gate_closed(
    conn: Connection, job: Any, seqs: dict[str, int], current: int | None
) -> bool:
    """No new group starts while an in-flight one is one publication from too stale."""
    bound = job["max_staleness"]
    if bound is None or current is None:
        return False
    dispatched = conn.execute(
        select(groups.c.dispatch_version).where(
            groups.c.job_id == job["id"], groups.c.state == "running"
        )
    ).scalars()
    lags = [current - seqs[v] for v in dispatched if v is not None and v in seqs]
    return any(lag >= max(bound, 1) for lag in lags)


# Built once: a lease of thousands of episodes runs these once per episode.
_TAKE = (
    update(episodes)
    .where(episodes.c.id == bindparam("b_episode"), episodes.c.state == "queued")
    .values(state="leased", lease_owner=bindparam("b_owner"), lease_expires=bindparam("b_expires"))
)
_LEASED = (
    select(episodes, groups.c.task_hash, groups.c.dispatch_version)
    .join(groups, groups.c.id == episodes.c.group_id)
    .where(episodes.c.id == bindparam("b_episode"))
)


def _take(
    conn: Connection,
    candidate: Any,
    worker: str,
    expires: float,
    job: Any,
    current: int | None,
    seqs: dict[str, int],
) -> Lease | None:
    taken = conn.execute(
        _TAKE, {"b_episode": candidate["id"], "b_owner": worker, "b_expires": expires}
    )
    if taken.rowcount != 1:
        return None
    if candidate["group_state"] == "pending":
        version = next((v for v, s in seqs.items() if s == current), None)
        conn.execute(
            update(groups)
            .where(groups.c.id == candidate["group_id"], groups.c.state == "pending")
            .values(state="running", dispatch_version=version)
        )
    row = conn.execute(_LEASED, {"b_episode": candidate["id"]}).mappings().one()
    return Lease(
        episode_id=row["id"],
        job_id=row["job_id"],
        group_id=row["group_id"],
        task_id=row["task_id"],
        task_hash=row["task_hash"],
        index=row["index"],
        attempt=row["attempt"],
        seed=row["seed"],
        dispatch_version=row["dispatch_version"],
    )


def take_job(conn: Connection, job_id: str, worker: str, expires: float) -> Lease:
    """The first episode of a job created in this transaction, leased to ``worker``: a driven
    session's job (``controller/sessions.py``) is never visible to other workers as queued."""
    seqs, current = version_seqs(conn)
    candidate = (
        conn.execute(
            select(episodes.c.id, episodes.c.group_id, groups.c.state.label("group_state"))
            .join(groups, groups.c.id == episodes.c.group_id)
            .where(episodes.c.job_id == job_id)
            .order_by(episodes.c.seq)
            .limit(1)
        )
        .mappings()
        .one()
    )
    taken = _take(conn, candidate, worker, expires, None, current, seqs)
    assert taken is not None  # the job is this transaction's own
    return taken


def renew(conn: Connection, worker: str, episode_ids: Collection[str], lease_s: float) -> set[str]:
    """Extend ``worker``'s leases; returns the ids it no longer holds."""
    if not episode_ids:
        return set()
    conn.execute(
        update(episodes)
        .where(
            episodes.c.lease_owner == worker,
            episodes.c.state == "leased",
            episodes.c.id.in_(list(episode_ids)),
        )
        .values(lease_expires=time.time() + lease_s)
    )
    held = set(
        conn.execute(
            select(episodes.c.id).where(
                episodes.c.lease_owner == worker, episodes.c.state == "leased"
            )
        ).scalars()
    )
    return set(episode_ids) - held


def release(conn: Connection, worker: str, episode_ids: Collection[str]) -> None:
    """Give leases back without an attempt (the job was cancelled or paused mid-episode).
    The groups' rows are locked first, as ``record`` does, so a release cannot requeue an
    episode while its result is being recorded."""
    group_ids = select(episodes.c.group_id).where(episodes.c.id.in_(list(episode_ids)))
    conn.execute(
        select(groups.c.id)
        .where(groups.c.id.in_(group_ids))
        .order_by(groups.c.id)
        .with_for_update()
    )
    conn.execute(
        update(episodes)
        .where(
            episodes.c.lease_owner == worker,
            episodes.c.state == "leased",
            episodes.c.id.in_(list(episode_ids)),
        )
        .values(state="queued", lease_owner=None, lease_expires=None)
    )
