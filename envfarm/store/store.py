"""The job store's front: jobs, policy versions, delivery cursors, workers.

Every method is one transaction, run on the store's own threads (``envfarm.store.engine``).
Episode leasing lives in ``envfarm.store.leases``, result recording in ``envfarm.store.results``,
groups in ``envfarm.store.groups`` and read models in ``envfarm.store.views``; this module submits
jobs, changes their status, publishes versions and serves delivered groups in cursor order.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from envfarm.errors import EnvfarmError, InvalidJobState, StoreError
from envfarm.models.jobs import (
    JobAction,
    JobRequest,
    JobStatus,
    JobView,
    RawGroup,
    TaskKey,
)
from envfarm.models.trajectory import Trajectory
from envfarm.store import groups as grp
from envfarm.store import leases as ls
from envfarm.store import results as rs
from envfarm.store.engine import is_sqlite, normalize_url, open_engine, wait_for_server
from envfarm.store.migrate import upgrade
from envfarm.store.schema import (
    consumers,
    episodes,
    groups,
    jobs,
    metadata,
    policy_versions,
    workers,
)
from envfarm.store.views import Forms, delivered_groups, is_terminal, job_row, job_view

T = TypeVar("T")
VERSIONS_LOCK_KEY = 0x76657273  # "vers": publications take the next sequence number one at a time

_TRANSITIONS: dict[JobAction, tuple[tuple[JobStatus, ...], JobStatus]] = {
    "pause": (("queued", "running"), "paused"),
    "resume": (("paused",), "running"),
    "cancel": (("queued", "running", "paused"), "cancelled"),
}


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


class Store:
    """A job store on SQLite (default, embedded) or PostgreSQL (shared by many controllers)."""

    def __init__(self, url: str, finalize: grp.Finalize | None = None) -> None:
        self.finalize = finalize
        """Computes a completed group's advantages (the controller's group policy)."""
        self.url = normalize_url(url)
        self.label = self.url.render_as_string(hide_password=True)
        self.engine = open_engine(self.url)
        threads = 1 if is_sqlite(self.url) else 4
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="envfarm-store")

    @classmethod
    async def open(cls, url: str, finalize: grp.Finalize | None = None) -> Store:
        store = cls(url, finalize)
        if store.url.database in (None, "", ":memory:") and is_sqlite(store.url):
            # An in-memory store lives and dies with this process: nothing to migrate later.
            await store.run(lambda: metadata.create_all(store.engine))
        else:
            if not is_sqlite(store.url):
                await store.run(lambda: wait_for_server(store.engine, store.label))
            await store.run(lambda: upgrade(store.engine))
        return store

    async def close(self) -> None:
        await self.run(self.engine.dispose)
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the store's threads; database errors become ``StoreError``."""

        def guarded() -> T:
            try:
                return fn()
            except EnvfarmError:
                raise
            except SQLAlchemyError as exc:
                raise self._error(exc) from exc

        return await asyncio.get_running_loop().run_in_executor(self._executor, guarded)

    def _error(self, exc: SQLAlchemyError) -> StoreError:
        error = StoreError(
            f"job store {self.label}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}"
        )
        error.__cause__ = exc
        return error

    async def transaction(self, fn: Callable[[Connection], T]) -> T:
        def body() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return await self.run(body)

    # Jobs

    async def create_job(self, request: JobRequest, task_hashes: dict[str, str]) -> str:
        job_id = f"job-{uuid.uuid4().hex[:12]}"

        def create(conn: Connection) -> str:
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
            grp.add_groups(conn, job_id, tasks, request)
            return job_id

        return await self.transaction(create)

    async def job(self, job_id: str) -> JobView:
        return await self.transaction(lambda conn: job_view(conn, job_row(conn, job_id)))

    async def jobs(self) -> list[JobView]:
        def read(conn: Connection) -> list[JobView]:
            rows = conn.execute(select(jobs).order_by(jobs.c.created_at.desc())).mappings().all()
            return [job_view(conn, row) for row in rows]

        return await self.transaction(read)

    async def job_request(self, job_id: str) -> JobRequest:
        def read(conn: Connection) -> JobRequest:
            return JobRequest.model_validate_json(job_row(conn, job_id)["request"])

        return await self.transaction(read)

    async def transition(self, job_id: str, action: JobAction) -> JobView:
        allowed, target = _TRANSITIONS[action]

        def change(conn: Connection) -> JobView:
            row = job_row(conn, job_id)
            if row["status"] == target:
                return job_view(conn, row)
            if row["status"] not in allowed:
                raise InvalidJobState(f"job {job_id} is {row['status']}: cannot {action} it")
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(status=target, updated_at=time.time())
            )
            return job_view(conn, job_row(conn, job_id))

        return await self.transaction(change)

    async def statuses(self, job_ids: Sequence[str]) -> dict[str, str]:
        def read(conn: Connection) -> dict[str, str]:
            rows = conn.execute(select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids)))
            return {row.id: row.status for row in rows}

        return await self.transaction(read)

    # Episodes (envfarm.store.leases, envfarm.store.results)

    async def lease(
        self, worker: str, slots: int, lease_s: float, ready: Collection[str]
    ) -> list[ls.Lease]:
        await self.expire()
        postgres = not is_sqlite(self.url)
        leases = await self.transaction(
            lambda conn: ls.lease(conn, worker, slots, lease_s, ready, postgres)
        )
        if leases:
            jobs_started = {lease.job_id for lease in leases}
            await self.transaction(lambda conn: grp.mark_running(conn, jobs_started))
        return leases

    async def expire(self) -> None:
        """Record every expired lease as a lost attempt, one transaction each."""
        now = time.time()
        for episode_id in await self.transaction(lambda conn: rs.expired(conn, now)):
            await self.transaction(functools.partial(_expire, episode_id, now, self.finalize))

    async def renew(self, worker: str, episode_ids: Collection[str], lease_s: float) -> set[str]:
        return await self.transaction(lambda conn: ls.renew(conn, worker, episode_ids, lease_s))

    async def release(self, worker: str, episode_ids: Collection[str]) -> None:
        await self.transaction(lambda conn: ls.release(conn, worker, episode_ids))

    async def record(self, worker: str, trajectory: Trajectory, final: bool) -> rs.Recorded:
        return await self.transaction(
            lambda conn: rs.record(conn, worker, trajectory, final, self.finalize)
        )

    async def record_many(
        self, worker: str, results: Sequence[tuple[Trajectory, bool]]
    ) -> list[rs.Recorded | EnvfarmError]:
        """``record`` for many results in one transaction (one commit, one trip to the
        store's thread), each under its own savepoint: a result that fails is answered with
        its error and undoes nothing of the others."""

        def write(conn: Connection) -> list[rs.Recorded | EnvfarmError]:
            if conn.dialect.name == "postgresql":
                # Lock the batch's groups first, in one order every worker follows, and only
                # then (completing a group) the job's row: two batches sharing groups cannot
                # each hold a lock the other waits for.
                ids = sorted({trajectory.group_id for trajectory, _ in results})
                conn.execute(
                    select(groups.c.id)
                    .where(groups.c.id.in_(ids))
                    .order_by(groups.c.id)
                    .with_for_update()
                ).all()
            answers: list[rs.Recorded | EnvfarmError] = []
            for trajectory, final in results:
                try:
                    with conn.begin_nested():
                        answers.append(rs.record(conn, worker, trajectory, final, self.finalize))
                except SQLAlchemyError as exc:
                    answers.append(self._error(exc))
                except EnvfarmError as exc:
                    answers.append(exc)
            return answers

        return await self.transaction(write)

    async def fail_task(self, job_id: str, task_hash: str, message: str) -> bool:
        return await self.transaction(lambda conn: grp.fail_task(conn, job_id, task_hash, message))

    async def open_work(self) -> dict[str, set[TaskKey]]:
        """Jobs that may still run episodes, each with the tasks that still have work."""
        return await self.transaction(
            lambda conn: grp.job_task_hashes(conn, ("queued", "running", "paused"))
        )

    async def failed_tasks(self, job_id: str) -> dict[str, str]:
        return await self.transaction(lambda conn: grp.failed_tasks(conn, job_id))

    async def trajectories(self, job_id: str) -> list[dict[str, Any]]:
        return await self.transaction(lambda conn: grp.all_trajectories(conn, job_id))

    # Delivery

    async def delivered(
        self,
        job_id: str,
        *,
        after: int | None,
        limit: int,
        consumer: str,
        max_bytes: int | None = None,
        forms: Forms = "both",
    ) -> tuple[list[RawGroup], int]:
        """Completed groups with a cursor above ``after`` (default: the consumer's ack), in
        order, and the job's last cursor. ``max_bytes``: stop after the group that brings the
        trajectories' text past it (a page always holds at least one group). ``forms``: which
        of each trajectory's texts to read (``views.delivered_groups``)."""
        found, last, _ = await self.delivered_page(
            job_id, after=after, limit=limit, consumer=consumer, max_bytes=max_bytes, forms=forms
        )
        return found, last

    async def delivered_page(
        self,
        job_id: str,
        *,
        after: int | None,
        limit: int,
        consumer: str,
        max_bytes: int | None = None,
        forms: Forms = "both",
    ) -> tuple[list[RawGroup], int, bool]:
        """``delivered()``, and whether this page ends the job's delivery: the job had ended
        when the page was read (in the same transaction) and no group comes after it."""

        def read(conn: Connection) -> tuple[list[RawGroup], int, bool]:
            job = job_row(conn, job_id, jobs.c.status, jobs.c.last_cursor)
            start = after if after is not None else _acked(conn, job_id, consumer)
            rows = conn.execute(
                select(groups)
                .where(groups.c.job_id == job_id, groups.c.cursor > start)
                .order_by(groups.c.cursor)
                .limit(limit)
            ).mappings()
            found = delivered_groups(conn, list(rows), forms, max_bytes)
            last = int(job["last_cursor"])
            reached = found[-1].cursor if found else start
            return found, last, is_terminal(job["status"]) and reached >= last

        return await self.transaction(read)

    async def ack(self, job_id: str, cursor: int, consumer: str) -> int:
        def write(conn: Connection) -> int:
            job = job_row(conn, job_id, jobs.c.last_cursor)
            if cursor > job["last_cursor"] or cursor < 0:
                raise InvalidJobState(
                    f"cursor {cursor} of job {job_id} was never delivered "
                    f"(the newest is {job['last_cursor']})",
                    field="cursor",
                )
            _create_consumer(conn, job_id, consumer)
            conn.execute(
                update(consumers)
                .where(
                    consumers.c.job_id == job_id,
                    consumers.c.name == consumer,
                    consumers.c.acked < cursor,  # never backwards, whatever commits first
                )
                .values(acked=cursor, updated_at=time.time())
            )
            return _acked(conn, job_id, consumer)

        return await self.transaction(write)

    # Policy versions

    async def publish_version(self, version: str) -> None:
        def write(conn: Connection) -> None:
            if conn.dialect.name == "postgresql":  # SQLite's BEGIN IMMEDIATE serializes already
                conn.execute(select(func.pg_advisory_xact_lock(VERSIONS_LOCK_KEY)))
            now = time.time()
            exists = conn.execute(
                select(policy_versions.c.seq).where(policy_versions.c.version == version)
            ).first()
            if exists is not None:
                conn.execute(
                    update(policy_versions)
                    .where(policy_versions.c.version == version)
                    .values(published_at=now)
                )
                return
            seq = conn.execute(select(func.coalesce(func.max(policy_versions.c.seq), 0))).scalar()
            conn.execute(
                insert(policy_versions).values(
                    version=version, seq=int(seq or 0) + 1, published_at=now
                )
            )

        await self.transaction(write)

    async def versions(self) -> tuple[list[str], str | None]:
        """Every published version in publication order, and the current one."""

        def read(conn: Connection) -> tuple[list[str], str | None]:
            rows = conn.execute(select(policy_versions).order_by(policy_versions.c.seq)).all()
            current = max(rows, key=lambda r: r.published_at).version if rows else None
            return [r.version for r in rows], current

        return await self.transaction(read)

    async def task_hashes(self, job_id: str) -> dict[str, str]:
        def read(conn: Connection) -> dict[str, str]:
            job_row(conn, job_id, jobs.c.id)
            rows = conn.execute(
                select(groups.c.task_id, groups.c.task_hash).where(groups.c.job_id == job_id)
            ).all()
            return {row.task_id: row.task_hash for row in rows}

        return await self.transaction(read)

    # Metrics

    async def episode_states(self) -> dict[str, int]:
        def read(conn: Connection) -> dict[str, int]:
            rows = conn.execute(
                select(episodes.c.state, func.count()).group_by(episodes.c.state)
            ).all()
            return {row[0]: int(row[1]) for row in rows}

        return await self.transaction(read)

    async def staleness(self) -> dict[str, int]:
        """Per running job: the staleness of its newest completed group."""

        def read(conn: Connection) -> dict[str, int]:
            rows = conn.execute(
                select(groups.c.job_id, groups.c.staleness, groups.c.cursor)
                .join(jobs, jobs.c.id == groups.c.job_id)
                .where(jobs.c.status == "running", groups.c.staleness.is_not(None))
                .order_by(groups.c.cursor)
            ).all()
            return {row.job_id: int(row.staleness) for row in rows}

        return await self.transaction(read)

    # Workers

    async def register_worker(self, worker_id: str, host: str, pid: int) -> None:
        def write(conn: Connection) -> None:
            now = time.time()
            conn.execute(
                insert(workers).values(
                    id=worker_id,
                    host=host,
                    pid=pid,
                    started_at=now,
                    heartbeat_at=now,
                    stopped=False,
                )
            )

        await self.transaction(write)

    async def reclaim_dead_workers(self, host: str, alive: Callable[[int], bool]) -> int:
        """Expire at once the leases of this host's workers whose process is gone."""

        def write(conn: Connection) -> int:
            rows = conn.execute(
                select(workers.c.id, workers.c.pid).where(
                    workers.c.host == host, workers.c.stopped.is_(False)
                )
            ).all()
            dead = [row.id for row in rows if not alive(row.pid)]
            if dead:
                conn.execute(update(workers).where(workers.c.id.in_(dead)).values(stopped=True))
                rs.expire_leases_of(conn, dead)
            return len(dead)

        reclaimed = await self.transaction(write)
        await self.expire()
        return reclaimed

    async def stop_worker(self, worker_id: str) -> None:
        await self.transaction(
            lambda conn: conn.execute(
                update(workers).where(workers.c.id == worker_id).values(stopped=True)
            )
        )


def _acked(conn: Connection, job_id: str, consumer: str) -> int:
    acked = conn.execute(
        select(consumers.c.acked).where(consumers.c.job_id == job_id, consumers.c.name == consumer)
    ).scalar()
    return int(acked or 0)


def _expire(episode_id: str, now: float, finalize: grp.Finalize | None, conn: Connection) -> None:
    rs.expire_one(conn, episode_id, now, finalize)


def _create_consumer(conn: Connection, job_id: str, consumer: str) -> None:
    """The consumer's row, created once even when two first acks race."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    values = {"job_id": job_id, "name": consumer, "acked": 0, "updated_at": time.time()}
    conn.execute(dialect.insert(consumers).values(**values).on_conflict_do_nothing())
