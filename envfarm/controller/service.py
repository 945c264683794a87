"""The controller service: what ``envfarm serve`` exposes, over a store and (usually) a worker.

Every state change goes through the store, so any number of these processes, on one machine
or many, can share one PostgreSQL: the API of one accepts a job, the workers of all of them run
it, and whichever serves a consumer reads the same groups in the same cursor order. A long-poll
wakes at once for groups completed in this process and polls the store for the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from envfarm.controller.admission import Admission
from envfarm.controller.assembly import open_runner
from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.groups import finalize_group
from envfarm.controller.metrics import MetricsSnapshot
from envfarm.controller.planning import Planner
from envfarm.controller.policies import DRIVEN_POLICY
from envfarm.controller.versions import PolicyVersionBoard
from envfarm.controller.worker import RunnerFactory, Worker, WorkerConfig, WorkerEvents
from envfarm.errors import EnvfarmError, JobError, UnknownTask
from envfarm.models.jobs import JobRequest, JobView, RawGroupPage, TaskInfo
from envfarm.processes import host_name
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.sandbox.pool import WarmPools
from envfarm.settings import Settings, current
from envfarm.spec.task import Task
from envfarm.store.store import Store

STORE_POLL_S = 0.25
PAGE_BYTES = 4 * 1024 * 1024
"""A page of groups stops near this size: one body of tens of megabytes takes longer to send
and parse than the same groups in pages of a few (bench/api.py), and stalls the read-ahead."""


class Controller:
    def __init__(
        self,
        store: Store,
        tasks: Mapping[str, Task],
        worker: Worker | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.store, self._tasks, self.worker = store, dict(tasks), worker
        self.settings = settings or Settings()

    async def submit(self, request: JobRequest) -> str:
        self._check_runtime(request.runtime)
        if request.policy.base_url == DRIVEN_POLICY:
            raise JobError(
                f"policy {DRIVEN_POLICY!r} belongs to the step API's sessions (docs/trainers.md); "
                "a job needs a policy that samples: oracle, nop or an endpoint URL",
                field="policy.base_url",
            )
        for index, task_id in enumerate(request.tasks):
            if task_id not in self._tasks:
                raise UnknownTask(
                    f"unknown task {task_id!r}: the server knows {len(self._tasks)} tasks "
                    "(GET /v1/tasks)",
                    field=f"tasks[{index}]",
                )
        hashes = {task_id: self._tasks[task_id].content_hash for task_id in request.tasks}
        job_id = await self.store.create_job(request, hashes)
        self._wake()
        return job_id

    def _check_runtime(self, runtime: str | None) -> None:
        """A job may ask for the server's runtime or one it allows (``--allow-runtime``): a
        runtime weakens or strengthens the isolation of untrusted code, the server's call."""
        allowed = [r for r in (self.settings.runtime, *self.settings.allowed_runtimes) if r]
        if runtime is None or runtime in allowed:
            return
        offered = ", ".join(map(repr, allowed)) or "none (the engine's default only)"
        raise JobError(
            f"runtime {runtime!r} is not allowed on this server; allowed: {offered} "
            f"(the server allows more with --allow-runtime {runtime})",
            field="runtime",
        )

    async def job(self, job_id: str) -> JobView:
        return await self.store.job(job_id)

    async def jobs(self) -> list[JobView]:
        return await self.store.jobs()

    async def pause(self, job_id: str) -> JobView:
        return await self.store.transition(job_id, "pause")

    async def resume(self, job_id: str) -> JobView:
        view = await self.store.transition(job_id, "resume")
        self._wake()
        return view

    async def cancel(self, job_id: str) -> JobView:
        view = await self.store.transition(job_id, "cancel")
        self._wake()
        return view

    async def groups(
        self,
        job_id: str,
        *,
        after: int | None,
        limit: int,
        wait_s: float,
        consumer: str = "default",
        packed: bool = False,
    ) -> RawGroupPage:
        """Completed groups after ``after`` (default: the consumer's last ack), waiting up to
        ``wait_s`` for the first one when none is there yet. ``packed``: the answer sends the
        packed copies, so the JSON text is read only where a trajectory has none."""
        deadline = time.monotonic() + wait_s
        while True:
            changed = self.worker.changed if self.worker is not None else None
            found, _, ended = await self.store.delivered_page(
                job_id, after=after, limit=limit, consumer=consumer, max_bytes=PAGE_BYTES,
                forms="packed" if packed else "json",
            )  # fmt: skip
            remaining = deadline - time.monotonic()
            if found or ended or remaining <= 0:
                break
            waiting = min(remaining, STORE_POLL_S)
            with contextlib.suppress(TimeoutError):
                if changed is not None:
                    async with asyncio.timeout(waiting):
                        await changed.wait()
                else:
                    await asyncio.sleep(waiting)
        next_cursor = found[-1].cursor if found else after
        return RawGroupPage(groups=found, next_cursor=next_cursor, ended=ended)

    async def ack(self, job_id: str, cursor: int, consumer: str = "default") -> None:
        await self.store.ack(job_id, cursor, consumer)

    async def publish_version(self, version: str) -> None:
        await self.store.publish_version(version)
        if self.worker is not None:
            self.worker.board.publish(version)

    def tasks(self) -> list[TaskInfo]:
        return [
            TaskInfo(
                id=task.id,
                content_hash=task.content_hash,
                path=str(task.root),
                services=sorted(task.compose.services) if task.compose else [],
            )
            for task in sorted(self._tasks.values(), key=lambda t: t.id)
        ]

    async def metrics(self) -> MetricsSnapshot:
        snapshot = (
            self.worker.metrics.snapshot.model_copy(deep=True)
            if self.worker is not None
            else MetricsSnapshot()
        )
        snapshot.episodes_by_state = await self.store.episode_states()
        snapshot.queue_depth = snapshot.episodes_by_state.get("queued", 0)
        snapshot.staleness = await self.store.staleness()
        _, snapshot.policy_version = await self.store.versions()
        snapshot.running = self.worker.running if self.worker is not None else 0
        return snapshot

    def _wake(self) -> None:
        if self.worker is not None:
            self.worker.wake()


def default_runners(
    backend: SandboxBackend,
    artifacts_root: Path | None,
    pools: WarmPools | None = None,
    settings: Settings | None = None,
) -> RunnerFactory:
    """Opens each job's runner (one endpoint pool or built-in server per job)."""

    def runners(
        job_id: str, request: JobRequest, board: PolicyVersionBoard
    ) -> AbstractAsyncContextManager[EpisodeRunner]:
        return open_runner(
            request,
            backend,
            run_id=job_id,
            versions=board,
            artifacts_dir=artifacts_root / job_id if artifacts_root else None,
            pools=pools,
            settings=settings,
        )

    return runners


@asynccontextmanager
async def open_controller(
    db_url: str,
    tasks: Mapping[str, Task],
    *,
    backend: SandboxBackend | None = None,
    worker: WorkerConfig | None = None,
    artifacts_root: Path | None = None,
    warm_pool: int = 0,
    settings: Settings | None = None,
) -> AsyncIterator[Controller]:
    """A controller on ``db_url``; with ``backend`` and ``worker``, it also runs episodes (in a
    background task, stopped on exit), under host admission, taking sandboxes from warm pools
    of ``warm_pool`` started sandboxes per environment when that is above 0. ``settings``: the
    server's defaults of every job's plan, and the runtimes a job may ask for."""
    settings = settings or current()
    store = await Store.open(db_url, finalize=finalize_group)
    running: asyncio.Task[None] | None = None
    stop = asyncio.Event()
    pools = None
    try:
        work = None
        if backend is not None and worker is not None:
            if warm_pool > 0:
                pools = WarmPools(backend, size=warm_pool, run_id=f"pool-{host_name()}")
            planner = Planner(backend, settings)
            events = WorkerEvents(on_image=_warming(pools, planner))
            runners = default_runners(backend, artifacts_root, pools, settings)
            work = Worker(
                store, tasks, backend, runners, worker, events, Admission(), planner=planner
            )
            running = asyncio.create_task(work.run(stop=stop))
        yield Controller(store, tasks, work, settings)
    finally:
        stop.set()
        if running is not None:
            await running
        if pools is not None:
            await pools.close()
        await store.close()


def _warming(
    pools: WarmPools | None, planner: Planner
) -> Callable[[Task, PreparedImage | None, EnvfarmError | None], None]:
    def warm(task: Task, image: PreparedImage | None, error: EnvfarmError | None) -> None:
        plan = planner.planned(task)
        if pools is not None and image is not None and plan is not None:
            pools.warm(plan.sandbox, image)

    return warm
