"""The worker: leases episodes from the store and runs them, as many at once as allowed.

A worker is the part of a controller process that does the work; the API only writes to the
store. Each tick it (1) starts building the images of tasks that have work, concurrently but
bounded, once per content hash, and leases episodes only of tasks whose image is ready, so no
episode slot waits on a build; (2) leases up to its free slots (the store applies priorities,
fair sharing, per-job limits and the staleness gate); (3) renews its leases and stops episodes
whose lease it lost or whose job was cancelled. Results are recorded in batches, one store
transaction for all that are ready (``envfarm.controller.record_batch``). An attempt that
failed for a retryable infrastructure reason goes back to the queue, to this or any worker, up
to the job's ``max_retries``; every attempt is recorded. Several workers on one PostgreSQL
split the work; a worker killed mid-episode loses its leases, which expire (or are reclaimed
at once by the next worker on the same host) and are retried elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

import envfarm
from envfarm.agent.driven import Driver
from envfarm.controller.admission import Admission
from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.images import BUILD_RETRY_S, ImageBuilds
from envfarm.controller.metrics import WorkerMetrics
from envfarm.controller.phases import Phase, error_info
from envfarm.controller.planning import Planner
from envfarm.controller.record_batch import RecordBatcher
from envfarm.controller.versions import PolicyVersionBoard
from envfarm.errors import (
    EnvfarmError,
    SessionAbandoned,
    SessionCapacity,
    SessionEnded,
    StoreError,
)
from envfarm.models.jobs import JobRequest, TaskKey
from envfarm.models.trajectory import Provenance, Reward, Trajectory
from envfarm.processes import host_name, pid_alive
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.spec.task import Task
from envfarm.store.leases import Lease
from envfarm.store.results import Recorded
from envfarm.store.store import Store
from envfarm.store.views import is_terminal

log = logging.getLogger(__name__)
RECORD_RETRY_MAX_S = 16.0
SLOT_WAIT_S = 10.0
"""How long a driven session's reset waits for a slot before it is refused."""

RunnerFactory = Callable[
    [str, JobRequest, PolicyVersionBoard], AbstractAsyncContextManager[EpisodeRunner]
]
"""Opens what a job's episodes need (its policy client, judge, grader) as an EpisodeRunner."""


class WorkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(default=4, ge=1)
    """Episodes this worker runs at once (every job together)."""
    build_concurrency: int = Field(default=2, ge=1)
    lease_s: float = Field(default=30.0, gt=0)
    """A lease not renewed for this long is lost; renewed every third of it."""
    poll_s: float = Field(default=0.5, gt=0)
    build_retry_s: float = Field(default=BUILD_RETRY_S, ge=0)
    """Wait before building again an image whose build failed for an infrastructure reason."""


@dataclass
class WorkerEvents:
    """Callbacks for a shell's progress display."""

    on_image: Callable[[Task, PreparedImage | None, EnvfarmError | None], None] = (
        lambda task, image, error: None
    )
    on_episode: Callable[[Trajectory], None] = lambda trajectory: None
    on_groups_ready: Callable[[str], Awaitable[None] | None] = lambda job_id: None
    """Groups of this job completed here (called with its id); read them from the store."""


@dataclass
class _OpenJob:
    request: JobRequest
    runner: EpisodeRunner
    stack: AsyncExitStack
    running: int = 0


@dataclass
class Worker:
    store: Store
    tasks: Mapping[str, Task]
    backend: SandboxBackend
    runners: RunnerFactory
    config: WorkerConfig = field(default_factory=WorkerConfig)
    events: WorkerEvents = field(default_factory=WorkerEvents)
    admission: Admission | None = None
    """Host admission: an episode starts only when the host has its CPU and memory to spare."""
    slots: asyncio.Semaphore | None = None
    """Held by each episode while it runs, besides ``concurrency``: a limit this worker shares
    with other work of its process (``envfarm check``: its other stages, image inspections)."""
    id: str = field(default_factory=lambda: f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")
    planner: Planner | None = None
    """Plans each task its images are built for (None: the environment's settings and no
    job's choices); a job's runner plans its episodes with the job's own."""

    def __post_init__(self) -> None:
        if self.planner is None:
            self.planner = Planner(self.backend)
        self.board = PolicyVersionBoard()
        self.metrics = WorkerMetrics()
        self.changed = asyncio.Event()
        """Set (and replaced) whenever a group completes here: long-polls wait on it."""
        self._wake = asyncio.Event()
        self._images = ImageBuilds(
            self.planner,
            self.config.build_concurrency,
            self._on_image,
            self._bad_task,
            self.wake,
            retry_s=self.config.build_retry_s,
        )
        self._records = RecordBatcher(self.store, self.id)
        self._running: dict[str, tuple[Lease, asyncio.Task[None]]] = {}
        self._open_jobs: dict[str, _OpenJob] = {}
        self._open_job_locks: dict[str, asyncio.Lock] = {}
        self._renewed = 0.0
        self._reserved = 0
        self._freed = asyncio.Event()
        """Set (and replaced) whenever an episode gives its slot back."""
        """Slots held by driven sessions whose episode is about to start."""

    def wake(self) -> None:
        """Look for work now rather than at the next poll (a job was submitted or resumed)."""
        self._wake.set()

    @property
    def running(self) -> int:
        return len(self._running)

    async def run(self, *, stop: asyncio.Event | None = None, job_id: str | None = None) -> None:
        """Work until ``stop`` is set, or, with ``job_id``, until that job has ended."""
        stop = stop or asyncio.Event()
        await self.store.register_worker(self.id, host_name(), os.getpid())
        await self.store.reclaim_dead_workers(
            host_name(), lambda pid: pid != os.getpid() and pid_alive(pid)
        )
        await self.backend.reap()
        try:
            while not stop.is_set():
                try:
                    await self._tick()
                    if job_id is not None and await self._ended(job_id):
                        return
                except EnvfarmError as exc:
                    log.warning("worker %s: %s (retrying)", self.id, exc)
                except Exception:
                    log.exception("worker %s: unexpected error (retrying)", self.id)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.poll_s):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            await self._shutdown()

    async def _ended(self, job_id: str) -> bool:
        if self._running:
            return False
        status = (await self.store.statuses([job_id])).get(job_id)
        return status is not None and is_terminal(status)

    async def _tick(self) -> None:
        """Heartbeat when due; with a free slot, the open work (its images wanted) and leases.
        A full worker reads nothing: an episode's end wakes it, and the last read's wants
        stand."""
        if time.monotonic() - self._renewed > self.config.lease_s / 3:
            await self._heartbeat()
        free = self.config.concurrency - len(self._running) - self._reserved
        if free <= 0:
            return
        work = await self.store.open_work()
        for keys in work.values():
            for task_id, task_hash in keys:
                task = self.tasks.get(task_id)
                if task is not None and task.content_hash == task_hash:
                    self._images.want(task)
        ready = self._images.ready()
        if ready:
            for lease in await self.store.lease(self.id, free, self.config.lease_s, ready):
                running = asyncio.create_task(self._episode(lease))
                self._running[lease.episode_id] = (lease, running)
        for job_id in [j for j, rt in self._open_jobs.items() if not rt.running and j not in work]:
            self._open_job_locks.pop(job_id, None)
            await self._open_jobs.pop(job_id).stack.aclose()

    def _on_image(
        self, task: Task, image: PreparedImage | None, error: EnvfarmError | None
    ) -> None:
        with contextlib.suppress(Exception):  # a display callback must not stop the worker
            self.events.on_image(task, image, error)

    async def _bad_task(self, task: Task, error: EnvfarmError) -> None:
        """The task's input is bad: its open groups fail with the reason, in every job."""
        for job, keys in (await self.store.open_work()).items():
            if TaskKey(task.id, task.content_hash) in keys:
                await self.store.fail_task(job, task.content_hash, str(error))

    async def _heartbeat(self) -> None:
        self._renewed = time.monotonic()
        lost = await self.store.renew(self.id, list(self._running), self.config.lease_s)
        job_ids = {lease.job_id for lease, _ in self._running.values()}
        statuses = await self.store.statuses(list(job_ids)) if job_ids else {}
        cancelled = {job for job, status in statuses.items() if status == "cancelled"}
        stop = [
            episode
            for episode, (lease, _) in self._running.items()
            if episode in lost or lease.job_id in cancelled
        ]
        for episode in stop:
            self._running[episode][1].cancel()
        names, current = await self.store.versions()
        for version in [*names, current]:
            if version is not None and version != self.board.current:
                self.board.publish(version)

    async def drive(self, task: Task, request: JobRequest, driver: Driver) -> Lease:
        """Start a driven session's episode (``controller/sessions.py``) as one of this
        worker's own: it holds a slot of ``concurrency``, its lease is renewed with the others,
        and its trajectory is recorded like any other (``driver.finished`` gets it).
        ``SessionCapacity`` when every slot is taken; the task's build error if it has one."""
        await self._slot(SLOT_WAIT_S)
        self._reserved += 1
        try:
            _, error = await self._images.wait(task)
            if error is not None:
                raise error
            lease = await self.store.create_leased_job(
                request, {task.id: task.content_hash}, self.id, self.config.lease_s
            )
            running = asyncio.create_task(self._episode(lease, driver))
            self._running[lease.episode_id] = (lease, running)
        finally:
            self._reserved -= 1
        return lease

    async def _slot(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for a free slot (a session just ended may still hold one)."""
        try:
            async with asyncio.timeout(wait_s):
                while len(self._running) + self._reserved >= self.config.concurrency:
                    await self._freed.wait()
        except TimeoutError:
            raise SessionCapacity(
                f"all {self.config.concurrency} episode slots of this server are in use"
            ) from None

    async def _episode(self, lease: Lease, driver: Driver | None = None) -> None:
        try:
            job = await self._open_job(lease.job_id)
            job.running += 1
            try:
                await self._run_attempt(lease, job, driver)
            finally:
                job.running -= 1
        except asyncio.CancelledError:
            with contextlib.suppress(EnvfarmError):
                if driver is None:
                    await asyncio.shield(self.store.release(self.id, [lease.episode_id]))
                else:  # a session is never run again without its trainer
                    stopped = SessionAbandoned("the server stopped the session")
                    await asyncio.shield(self._failed(lease, stopped, driver, "agent"))
            raise
        except Exception as exc:
            try:
                await self._failed(lease, exc, driver)
            except EnvfarmError as unrecorded:
                log.warning("episode %s: %s (%s); its lease will expire and it will be retried",
                            lease.episode_id, exc, unrecorded)  # fmt: skip
        finally:
            self._running.pop(lease.episode_id, None)
            self._freed.set()
            self._freed = asyncio.Event()
            if driver is not None and not driver.finished.done():
                if driver.trajectory is not None:  # its slot is free by the time it answers
                    driver.finished.set_result(driver.trajectory)
                else:
                    driver.finished.set_exception(SessionEnded("the session's episode was lost"))
            self.wake()

    async def _run_attempt(self, lease: Lease, job: _OpenJob, driver: Driver | None) -> None:
        task = self.tasks[lease.task_id]
        image, error = self._images.get(lease.task_hash)
        request = EpisodeRequest(
            task=task,
            image=image,
            job_id=lease.job_id,
            group_id=lease.group_id,
            episode_id=lease.episode_id,
            attempt=lease.attempt,
            seed=lease.seed,
            build_error=error,
            driver=driver,
        )
        environment = task.config.environment
        admitted = (
            self.admission.admit(environment.cpus, environment.memory_mb)
            if self.admission is not None
            else contextlib.nullcontext()
        )
        async with self.slots or contextlib.nullcontext(), admitted:
            trajectory = await job.runner.run(request)
        await self._finish(lease, trajectory, job.request.max_retries, driver)

    async def _finish(
        self, lease: Lease, trajectory: Trajectory, max_retries: int, driver: Driver | None
    ) -> None:
        """Record the attempt (final unless a retryable fault has retries left), then tell."""
        error = trajectory.error
        final = error is None or not error.retryable or lease.attempt >= max_retries
        recorded = await self._record(trajectory, final)
        if driver is not None:
            driver.trajectory = trajectory
        self.metrics.attempt(trajectory, final)
        if recorded.status == "lost":
            log.warning(
                "episode %s: lease lost before its result was recorded; discarded", lease.episode_id
            )
            return
        try:
            if final:
                self.events.on_episode(trajectory)
            if recorded.group_completed:
                self.changed.set()
                self.changed = asyncio.Event()
                delivered = self.events.on_groups_ready(lease.job_id)
                if delivered is not None:
                    await delivered
        except Exception:  # a shell's callback failing must not undo a recorded result
            log.exception("episode %s: a progress callback failed", lease.episode_id)

    async def _failed(
        self,
        lease: Lease,
        exc: Exception,
        driver: Driver | None = None,
        at: Phase = "provision",
    ) -> None:
        """An attempt that failed before its runner could say why (the job's policy or judge
        could not be opened, an unexpected error) is recorded with the real reason, rather
        than left to expire as a lost worker."""
        info = error_info(exc, at)
        trajectory = Trajectory(
            trajectory_id=f"{lease.episode_id}-a{lease.attempt}",
            episode_id=lease.episode_id,
            job_id=lease.job_id,
            group_id=lease.group_id,
            task_id=lease.task_id,
            attempt=lease.attempt,
            reward=Reward(reason=f"{at} failed: {info.message}"),
            error=info,
            provenance=Provenance(
                task_hash=lease.task_hash, envfarm_version=envfarm.__version__, seed=lease.seed
            ),
        )
        request = await self.store.job_request(lease.job_id)
        await self._finish(lease, trajectory, request.max_retries, driver)

    async def _record(self, trajectory: Trajectory, final: bool) -> Recorded:
        """Record a result, riding out a short store outage (the lease is renewed meanwhile)."""
        delay = 0.5
        while True:
            try:
                return await self._records.record(trajectory, final)
            except StoreError as exc:
                if delay > RECORD_RETRY_MAX_S:
                    raise
                log.warning("episode %s: %s; retrying in %.1fs", trajectory.episode_id, exc, delay)
                await asyncio.sleep(delay)
                delay *= 2

    async def _open_job(self, job_id: str) -> _OpenJob:
        async with self._open_job_locks.setdefault(job_id, asyncio.Lock()):
            if job_id not in self._open_jobs:
                request = await self.store.job_request(job_id)
                stack = AsyncExitStack()
                runner = await stack.enter_async_context(self.runners(job_id, request, self.board))
                self._open_jobs[job_id] = _OpenJob(request, runner, stack)
            return self._open_jobs[job_id]

    async def _shutdown(self) -> None:
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._records.close()
        await self._images.close()
        for job in self._open_jobs.values():
            with contextlib.suppress(Exception):
                await job.stack.aclose()
        self._open_jobs.clear()
        with contextlib.suppress(EnvfarmError):
            await self.store.stop_worker(self.id)


@contextlib.asynccontextmanager
async def fixed_runner(runner: EpisodeRunner) -> AsyncIterator[EpisodeRunner]:
    """A ``RunnerFactory`` result for callers that built their runner themselves."""
    yield runner
