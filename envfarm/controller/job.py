"""A job run in-process: every task times ``group_size`` episodes, on a private store.

This is the store-backed controller (``envfarm.controller.worker``) driven to completion over
an in-memory SQLite store, for callers that hold an ``EpisodeRunner`` and want the job's
trajectories back (``envfarm check``, benchmarks, tests). Building, admission, retries and
group completion are exactly what ``envfarm run`` and ``envfarm serve`` do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.groups import finalize_group
from envfarm.controller.worker import Worker, WorkerConfig, WorkerEvents, fixed_runner
from envfarm.errors import EnvfarmError, ImageError
from envfarm.models.jobs import JobPolicy, JobRequest, Sampling
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task
from envfarm.store.store import Store


class JobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_size: int = 1
    concurrency: int = 4
    build_concurrency: int = 2
    max_retries: int = 2
    seed: int | None = None
    leave_one_out: bool = False


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
    ) -> None:
        self.tasks, self.runner, self.config = list(tasks), runner, config
        self.events = events or JobEvents()
        self.id: str | None = None
        self._cursor = 0

    def request(self) -> JobRequest:
        return JobRequest(
            tasks=[task.id for task in self.tasks],
            policy=JobPolicy(base_url=self.runner.policy.name or "policy"),
            group_size=self.config.group_size,
            sampling=Sampling(seed=self.config.seed),
            max_retries=self.config.max_retries,
            leave_one_out=self.config.leave_one_out,
        )

    async def run(self) -> JobResult:
        store = await Store.open("sqlite://", finalize=finalize_group)
        try:
            job_id = self.id = await store.create_job(
                self.request(), {task.id: task.content_hash for task in self.tasks}
            )

            async def delivered(_: str) -> None:
                groups, _last = await store.delivered(
                    job_id, after=self._cursor, limit=1_000_000, consumer="job"
                )
                for group in groups:
                    self._cursor = group.cursor
                    done = self.events.on_group(
                        [Trajectory.model_validate(t) for t in group.trajectories]
                    )
                    if done is not None:
                        await done

            worker = Worker(
                store,
                {task.id: task for task in self.tasks},
                self.runner.backend,
                lambda *_: fixed_runner(self.runner),
                WorkerConfig(
                    concurrency=self.config.concurrency,
                    build_concurrency=self.config.build_concurrency,
                    poll_s=0.05,
                ),
                WorkerEvents(self.events.on_image, self.events.on_episode, delivered),
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
