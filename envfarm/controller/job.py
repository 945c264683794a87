"""A job run in-process: every task times ``group_size`` episodes, driven to completion.

This is the store-backed controller (``envfarm.controller.worker``) for callers that hold an
``EpisodeRunner`` and want the job's trajectories back: ``envfarm run`` (on a SQLite file in
its output directory, so ``--resume`` finishes an interrupted run without redoing finished
episodes), ``envfarm check``, benchmarks and tests (in memory). The job is a ``JobRequest``,
the same model the REST API takes; building, retries and group completion are exactly what
``envfarm serve`` does. How this process works it (concurrency, builds) is its ``WorkerConfig``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envfarm.controller.admission import Admission
from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.groups import finalize_group
from envfarm.controller.worker import Worker, WorkerConfig, WorkerEvents, fixed_runner
from envfarm.errors import EnvfarmError, ImageError, UnknownTask
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task
from envfarm.store.store import Store

CONSUMER = "job"
"""The store consumer a job run in-process delivers to (``on_group``), resumed runs included."""


@dataclass
class JobEvents:
    """Callbacks a caller uses to show progress and persist results."""

    on_image: Callable[[Task, PreparedImage | None, EnvfarmError | None], None] = (
        lambda task, image, error: None
    )
    on_episode: Callable[[Trajectory], None] = lambda trajectory: None
    on_group: Callable[[list[Trajectory]], Awaitable[None] | None] | None = None
    """A completed group's trajectories, once each, in cursor order (None: groups are only
    acknowledged, never parsed)."""


@dataclass
class JobResult:
    trajectories: list[Trajectory] = field(default_factory=list)
    bad_tasks: dict[str, EnvfarmError] = field(default_factory=dict)
    """Tasks that could not run because their input was bad (e.g. an unknown base image)."""


def request_for(tasks: Sequence[Task], runner: EpisodeRunner, **fields: Any) -> JobRequest:
    """A request for ``tasks`` on the runner's policy, with ``fields`` (``group_size``,
    ``max_retries``...) as given: for callers that already hold a runner."""
    policy = JobPolicy(base_url=runner.policy.name or "policy")
    return JobRequest(tasks=[task.id for task in tasks], policy=policy, **fields)


class Job:
    def __init__(
        self,
        tasks: Sequence[Task],
        runner: EpisodeRunner,
        request: JobRequest | None = None,
        events: JobEvents | None = None,
        *,
        worker: WorkerConfig | None = None,
        admission: bool = False,
        store_url: str = "sqlite://",
        resume: str | None = None,
    ) -> None:
        """``request``: the job (default: one episode of each task on the runner's policy);
        ``worker``: this process's concurrency and build settings; ``admission``: start an
        episode only when the host has its task's CPU and memory to spare; ``store_url``: where
        the job lives (default: in memory); ``resume``: the id of a job in that store to
        finish."""
        self.tasks, self.runner = list(tasks), runner
        self.request = request or request_for(self.tasks, runner)
        self.events = events or JobEvents()
        self.worker = worker or WorkerConfig()
        self.admission = admission
        self.store_url, self.id = store_url, resume
        self._cursor = 0

    async def run(self) -> JobResult:
        store = await Store.open(self.store_url, finalize=finalize_group)
        hashes = {task.id: task.content_hash for task in self.tasks}
        try:
            if self.id is None:
                self.id = await store.create_job(self.request, hashes)
            else:
                await _check_unchanged(store, self.id, hashes)
            job_id = self.id
            self._cursor = (await store.job(job_id)).consumers.get(CONSUMER, 0)
            handing_out = asyncio.Lock()

            async def delivered(_: str) -> None:
                """Hand each completed group to ``on_group`` once, in order (groups completed at
                the same moment by two episodes are handed out by one call), then ack it."""
                async with handing_out:
                    if self.events.on_group is None:  # nothing to hand out: acknowledge all
                        _none, last = await store.delivered(
                            job_id, after=self._cursor, limit=0, consumer=CONSUMER
                        )
                        if last > self._cursor:
                            self._cursor = await store.ack(job_id, last, CONSUMER)
                        return
                    groups, _last = await store.delivered(
                        job_id, after=self._cursor, limit=1_000_000, consumer=CONSUMER
                    )
                    for group in groups:
                        done = self.events.on_group(await _parsed(group.trajectories))
                        if done is not None:
                            await done
                        self._cursor = group.cursor
                        await store.ack(job_id, group.cursor, CONSUMER)

            worker = Worker(
                store,
                {task.id: task for task in self.tasks},
                self.runner.backend,
                lambda *_: fixed_runner(self.runner),
                self.worker.model_copy(update={"poll_s": min(self.worker.poll_s, 0.05)}),
                WorkerEvents(self.events.on_image, self.events.on_episode, delivered),
                admission=Admission() if self.admission else None,
                planner=self.runner.planner,
            )
            await worker.run(job_id=job_id)
            trajectories = await _parsed(await store.trajectories(job_id))
            failed = await store.failed_tasks(job_id)
            return JobResult(
                trajectories=trajectories,
                bad_tasks={task: ImageError(message) for task, message in failed.items()},
            )
        finally:
            await store.close()


PARSED_PER_STEP = 16


async def _parsed(raw: Sequence[str | dict[str, Any]]) -> list[Trajectory]:
    """Trajectories from the store, handing the event loop back every ``PARSED_PER_STEP``: a
    group of thousands would otherwise hold it for seconds while other episodes wait."""
    parsed = []
    for start in range(0, len(raw), PARSED_PER_STEP):
        if start:
            await asyncio.sleep(0)
        for item in raw[start : start + PARSED_PER_STEP]:
            if isinstance(item, str):
                parsed.append(Trajectory.model_validate_json(item))
            else:
                parsed.append(Trajectory.model_validate(item))
    return parsed


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
