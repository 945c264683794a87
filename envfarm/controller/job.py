"""A job run in-process: every task times ``group_size`` episodes, driven to completion.

This is the store-backed controller (``envfarm.controller.worker``) for callers that hold an
``EpisodeRunner`` and want the job's trajectories back: ``envfarm run`` (on a SQLite file in
its output directory, so ``--resume`` finishes an interrupted run without redoing finished
episodes), ``envfarm check``, benchmarks and tests (in memory). Building, retries and group
completion are exactly what ``envfarm serve`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from envfarm.controller.admission import Admission
from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.groups import finalize_group
from envfarm.controller.images import BUILD_RETRY_S
from envfarm.controller.worker import Worker, WorkerConfig, WorkerEvents, fixed_runner
from envfarm.errors import EnvfarmError, ImageError, UnknownTask
from envfarm.models.jobs import JobPolicy, JobRequest, Sampling
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task
from envfarm.store.store import Store

CONSUMER = "job"
"""The store consumer a job run in-process delivers to (``on_group``), resumed runs included."""


class JobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_size: int = 1
    concurrency: int = 4
    build_concurrency: int = 2
    max_retries: int = 2
    seed: int | None = None
    leave_one_out: bool = False
    admission: bool = False
    """Start an episode only when the host has its task's CPU and memory to spare."""
    build_retry_s: float = BUILD_RETRY_S
    """Wait before building again an image whose build failed for an infrastructure reason."""


@dataclass
class JobEvents:
    """Callbacks a caller uses to show progress and persist results."""

    on_image: Callable[[Task, PreparedImage | None, EnvfarmError | None], None] = (
        lambda task, image, error: None
    )
    on_episode: Callable[[Trajectory], None] = lambda trajectory: None
    on_group: Callable[[list[Trajectory]], Awaitable[None] | None] = lambda group: None


@dataclass
class JobResult:
    trajectories: list[Trajectory] = field(default_factory=list)
    bad_tasks: dict[str, EnvfarmError] = field(default_factory=dict)
    """Tasks that could not run because their input was bad (e.g. an unknown base image)."""


class Job:
    def __init__(
        self,
        tasks: Sequence[Task],
        runner: EpisodeRunner,
        config: JobConfig,
        events: JobEvents | None = None,
        *,
        store_url: str = "sqlite://",
        resume: str | None = None,
        request: JobRequest | None = None,
    ) -> None:
        """``store_url``: where the job lives (default: in memory); ``resume``: the id of a job
        already in that store to finish; ``request``: what to record as the job's request."""
        self.tasks, self.runner, self.config = list(tasks), runner, config
        self.events = events or JobEvents()
        self.store_url, self.id = store_url, resume
        self._request = request
        self._cursor = 0

    def request(self) -> JobRequest:
        if self._request is not None:
            return self._request
        return JobRequest(
            tasks=[task.id for task in self.tasks],
            policy=JobPolicy(base_url=self.runner.policy.name or "policy"),
            group_size=self.config.group_size,
            sampling=Sampling(seed=self.config.seed),
            max_retries=self.config.max_retries,
            leave_one_out=self.config.leave_one_out,
        )

    async def run(self) -> JobResult:
        store = await Store.open(self.store_url, finalize=finalize_group)
        hashes = {task.id: task.content_hash for task in self.tasks}
        try:
            if self.id is None:
                self.id = await store.create_job(self.request(), hashes)
            else:
                await _check_unchanged(store, self.id, hashes)
            job_id = self.id
            self._cursor = (await store.job(job_id)).consumers.get(CONSUMER, 0)
            handing_out = asyncio.Lock()

            async def delivered(_: str) -> None:
                """Hand each completed group to ``on_group`` once, in order (groups completed at
                the same moment by two episodes are handed out by one call), then ack it."""
                async with handing_out:
                    groups, _last = await store.delivered(
                        job_id, after=self._cursor, limit=1_000_000, consumer=CONSUMER
                    )
                    for group in groups:
                        done = self.events.on_group(
                            [Trajectory.model_validate_json(t) for t in group.trajectories]
                        )
                        if done is not None:
                            await done
                        self._cursor = group.cursor
                        await store.ack(job_id, group.cursor, CONSUMER)

            worker = Worker(
                store,
                {task.id: task for task in self.tasks},
                self.runner.backend,
                lambda *_: fixed_runner(self.runner),
                WorkerConfig(
                    concurrency=self.config.concurrency,
                    build_concurrency=self.config.build_concurrency,
                    poll_s=0.05,
                    build_retry_s=self.config.build_retry_s,
                ),
                WorkerEvents(self.events.on_image, self.events.on_episode, delivered),
                admission=Admission() if self.config.admission else None,
            )
            await worker.run(job_id=job_id)
            trajectories = [Trajectory.model_validate(t) for t in await store.trajectories(job_id)]
            failed = await store.failed_tasks(job_id)
            return JobResult(
                trajectories=trajectories,
                bad_tasks={task: ImageError(message) for task, message in failed.items()},
            )
        finally:
            await store.close()


async def _check_unchanged(store: Store, job_id: str, hashes: dict[str, str]) -> None:
    """A resumed job must see the very task files it started with."""
    for task_id, stored in (await store.task_hashes(job_id)).items():
        if task_id not in hashes:
            raise UnknownTask(f"task {task_id!r} of job {job_id} is no longer found", "tasks")
        if hashes[task_id] != stored:
            raise UnknownTask(
                f"task {task_id!r} changed since job {job_id} started (content hash "
                f"{stored[:12]} then, {hashes[task_id][:12]} now): a resumed run needs the same "
                "task files",
                "tasks",
            )
