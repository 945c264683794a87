"""The job store's front: one ``Store`` whose every call is one transaction.

Every method is one transaction, run on the store's own threads (``envfarm.store.engine``), and
most are a line over a pure SQL helper that takes the connection: jobs' rows and status changes
in ``envfarm.store.job_control``, episode leasing in ``envfarm.store.leases``, result recording
in ``envfarm.store.results``, groups in ``envfarm.store.groups``, a job's end in
``envfarm.store.job_end``, delivery and acknowledgements in ``envfarm.store.delivery``, policy
versions in ``envfarm.store.versions``, workers in ``envfarm.store.workers``, the figures for
``/metrics`` in ``envfarm.store.metrics`` and read models in ``envfarm.store.views``. This
module owns the threads, the translation of database errors into ``StoreError``, and what spans
several transactions (expiring leases one at a time).
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from envfarm.errors import EnvfarmError, StoreError
from envfarm.models.jobs import JobAction, JobRequest, JobView, RawGroup, TaskKey
from envfarm.models.trajectory import Trajectory
from envfarm.store import delivery, job_control, job_end, metrics, views
from envfarm.store import groups as grp
from envfarm.store import leases as ls
from envfarm.store import results as rs
from envfarm.store import versions as vs
from envfarm.store import workers as wk
from envfarm.store.engine import is_sqlite, normalize_url, open_engine, wait_for_server
from envfarm.store.migrate import upgrade
from envfarm.store.schema import groups, jobs, metadata
from envfarm.store.views import Forms, job_row, job_view

T = TypeVar("T")


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

    # Jobs (envfarm.store.job_control)

    async def create_job(self, request: JobRequest, task_hashes: dict[str, str]) -> str:
        job_id = f"job-{uuid.uuid4().hex[:12]}"
        return await self.transaction(
            lambda conn: job_control.create(conn, job_id, request, task_hashes)
        )

    async def create_leased_job(
        self, request: JobRequest, task_hashes: dict[str, str], worker: str, lease_s: float
    ) -> ls.Lease:
        """A job whose first episode is leased to ``worker`` as it is created: a session's."""
        job_id = f"job-{uuid.uuid4().hex[:12]}"

        def create(conn: Connection) -> ls.Lease:
            job_control.create(conn, job_id, request, task_hashes)
            lease = ls.take_job(conn, job_id, worker, time.time() + lease_s)
            job_control.mark_running(conn, {job_id})
            return lease

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
        return await self.transaction(lambda conn: job_control.transition(conn, job_id, action))

    async def statuses(self, job_ids: Sequence[str]) -> dict[str, str]:
        return await self.transaction(lambda conn: job_control.statuses(conn, job_ids))

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
            await self.transaction(lambda conn: job_control.mark_running(conn, jobs_started))
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
                rs.lock_groups(conn, {trajectory.group_id for trajectory, _ in results})
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
        return await self.transaction(
            lambda conn: job_end.fail_task(conn, job_id, task_hash, message)
        )

    async def open_work(self) -> dict[str, set[TaskKey]]:
        """Jobs that may still run episodes, each with the tasks that still have work."""
        return await self.transaction(
            lambda conn: views.job_task_hashes(conn, ("queued", "running", "paused"))
        )

    async def failed_tasks(self, job_id: str) -> dict[str, str]:
        return await self.transaction(lambda conn: views.failed_tasks(conn, job_id))

    async def trajectories(self, job_id: str) -> list[dict[str, Any]]:
        return await self.transaction(lambda conn: views.all_trajectories(conn, job_id))

    # Delivery (envfarm.store.delivery)

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
        return await self.transaction(
            lambda conn: delivery.page(conn, job_id, after, limit, consumer, max_bytes, forms)
        )

    async def ack(self, job_id: str, cursor: int, consumer: str) -> int:
        return await self.transaction(lambda conn: delivery.ack(conn, job_id, cursor, consumer))

    # Policy versions (envfarm.store.versions)

    async def publish_version(self, version: str) -> None:
        await self.transaction(lambda conn: vs.publish(conn, version))

    async def versions(self) -> tuple[list[str], str | None]:
        """Every published version in publication order, and the current one."""
        return await self.transaction(vs.published)

    async def task_hashes(self, job_id: str) -> dict[str, str]:
        def read(conn: Connection) -> dict[str, str]:
            job_row(conn, job_id, jobs.c.id)
            rows = conn.execute(
                select(groups.c.task_id, groups.c.task_hash).where(groups.c.job_id == job_id)
            ).all()
            return {row.task_id: row.task_hash for row in rows}

        return await self.transaction(read)

    # Metrics (envfarm.store.metrics)

    async def episode_states(self) -> dict[str, int]:
        return await self.transaction(metrics.episode_states)

    async def staleness(self) -> dict[str, int]:
        """Per running job: the staleness of its newest completed group."""
        return await self.transaction(metrics.staleness)

    # Workers (envfarm.store.workers)

    async def register_worker(self, worker_id: str, host: str, pid: int) -> None:
        await self.transaction(lambda conn: wk.register(conn, worker_id, host, pid))

    async def reclaim_dead_workers(self, host: str, alive: Callable[[int], bool]) -> int:
        """Expire at once the leases of this host's workers whose process is gone."""
        reclaimed = await self.transaction(lambda conn: wk.reclaim_dead(conn, host, alive))
        await self.expire()
        return reclaimed

    async def stop_worker(self, worker_id: str) -> None:
        await self.transaction(lambda conn: wk.stop(conn, worker_id))


def _expire(episode_id: str, now: float, finalize: grp.Finalize | None, conn: Connection) -> None:
    rs.expire_one(conn, episode_id, now, finalize)
