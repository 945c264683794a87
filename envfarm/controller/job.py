"""A job: every task times ``group_size`` episodes, built, run, retried and grouped.

Images are built first, concurrently but bounded, once per task; an episode is admitted only
when its image exists, so no episode slot waits on a build. Episodes then run under one
concurrency limit. An attempt that failed for a retryable infrastructure reason is run again,
up to ``max_retries``; the last attempt is the episode's result. When every episode of a group
has ended, the group's advantages are computed and the group is handed to ``on_group``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.groups import assign_advantages
from envfarm.errors import EnvfarmError
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task


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
    """Callbacks a shell (CLI, API) uses to show progress and persist results."""

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
        job_id: str | None = None,
    ) -> None:
        self.tasks, self.runner, self.config = list(tasks), runner, config
        self.events = events or JobEvents()
        self.id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        self.result = JobResult()
        self._episode_slots = asyncio.Semaphore(config.concurrency)
        self._build_slots = asyncio.Semaphore(config.build_concurrency)

    async def run(self) -> JobResult:
        await self.runner.backend.reap()
        async with asyncio.TaskGroup() as group:
            for task in self.tasks:
                group.create_task(self._run_task(task))
        return self.result

    async def _run_task(self, task: Task) -> None:
        image, error = await self._prepare(task)
        if error is not None and not error.infrastructure:
            self.result.bad_tasks[task.id] = error
            return
        await self._run_group(task, image, error)

    async def _prepare(self, task: Task) -> tuple[PreparedImage | None, EnvfarmError | None]:
        async with self._build_slots:
            try:
                image = await self.runner.backend.prepare(task)
            except EnvfarmError as exc:
                self.events.on_image(task, None, exc)
                return None, exc
        self.events.on_image(task, image, None)
        return image, None

    async def _run_group(
        self, task: Task, image: PreparedImage | None, build_error: EnvfarmError | None
    ) -> None:
        group_id = f"grp-{uuid.uuid4().hex[:12]}"
        requests = [
            EpisodeRequest(
                task=task,
                image=image,
                job_id=self.id,
                group_id=group_id,
                episode_id=f"ep-{uuid.uuid4().hex[:12]}",
                seed=None if self.config.seed is None else self.config.seed + index,
                build_error=build_error,
            )
            for index in range(self.config.group_size)
        ]
        trajectories = await asyncio.gather(*(self._run_episode(r) for r in requests))
        assign_advantages(trajectories, leave_one_out=self.config.leave_one_out)
        self.result.trajectories.extend(trajectories)
        delivered = self.events.on_group(trajectories)
        if delivered is not None:
            await delivered

    async def _run_episode(self, request: EpisodeRequest) -> Trajectory:
        attempt = 0
        while True:
            async with self._episode_slots:
                trajectory = await self.runner.run(replace(request, attempt=attempt))
            error = trajectory.error
            if error is None or not error.retryable or attempt >= self.config.max_retries:
                self.events.on_episode(trajectory)
                return trajectory
            attempt += 1
