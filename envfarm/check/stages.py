"""The episode stages of ``envfarm check``, run side by side as one pipeline.

A stage (``oracle``, ``nop``, and with ``--compare-modes`` ``clean`` and ``shared``) is one
policy run a number of times per task by a ``Worker`` over an in-memory store of its own, as
``envfarm run`` runs a job: same episodes, retries and groups. Each stage has its own worker
because it has its own tasks: a stage of another verifier mode holds the tasks in that mode,
under the same ids. A task's episodes are a job of their own, submitted to a stage as soon as
the task's image is built (``Stage.run``), so no stage waits for another, nor a fast task for
a slow one. Every episode of every stage holds one of ``slots`` while it runs, the slots the
image inspections take too: one ``--concurrency`` bounds them all together. The workers build
nothing: a task reaches them once its image is built, and their ``prepare`` finds it cached.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.controller.assembly import open_runner
from envfarm.controller.episode import EpisodeRunner, EpisodeWatcher
from envfarm.controller.groups import finalize_group
from envfarm.controller.planning import Planner
from envfarm.controller.worker import Worker, WorkerConfig, WorkerEvents, fixed_runner
from envfarm.errors import StoreError
from envfarm.grading.base import Grader
from envfarm.models.jobs import JobPolicy, JobRequest, JudgeRequest
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import SandboxBackend
from envfarm.settings import Settings
from envfarm.spec.task import Task
from envfarm.store.store import Store
from envfarm.store.views import is_terminal

WAIT_S = 1.0
"""How often a waiting job's status is read when no completed group woke it (a job whose task
its worker refused ends without one)."""
POLL_S = 0.05


@dataclass(frozen=True)
class StageSpec:
    name: str
    """The stage as progress events name it."""
    policy: str
    """``oracle`` or ``nop``."""
    runs: int
    tasks: Mapping[str, Task]
    """The tasks as this stage runs them, by id."""


@dataclass(frozen=True)
class RunSettings:
    """What every stage's jobs and runners share."""

    backend: SandboxBackend
    settings: Settings
    """What every stage's episodes are planned with."""
    planner: Planner
    """Plans each task's build (in its own verifier mode)."""
    grader: Grader
    run_id: str
    slots: asyncio.Semaphore
    worker: WorkerConfig
    max_retries: int
    judge: JudgeRequest | None
    artifacts_dir: Path | None
    oracle_watcher: EpisodeWatcher | None = None
    """Looks into the oracle's episodes (the image inspection's, ``oracle_look``)."""


@dataclass
class Stage:
    spec: StageSpec
    settings: RunSettings
    store: Store
    worker: Worker
    running: asyncio.Task[None]
    woken: dict[str, asyncio.Event] = field(default_factory=dict)

    async def run(self, task_id: str) -> list[Trajectory]:
        """The task's episodes in this stage, as one job: its final trajectories, in order
        (none when its worker refused the task)."""
        task = self.spec.tasks[task_id]
        request = job_request(self.spec, self.settings, [task.id])
        job_id = await self.store.create_job(request, {task.id: task.content_hash})
        woken = self.woken.setdefault(job_id, asyncio.Event())
        self.worker.wake()
        while not is_terminal((await self.store.statuses([job_id]))[job_id]):
            if self.running.done():
                await self.running  # the worker's own error, if it raised one
                raise StoreError(f"the {self.spec.name} stage stopped before {task.id} ended")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WAIT_S):
                    await woken.wait()
            woken.clear()
        del self.woken[job_id]
        return [Trajectory.model_validate(raw) for raw in await self.store.trajectories(job_id)]


def job_request(spec: StageSpec, settings: RunSettings, task_ids: list[str]) -> JobRequest:
    return JobRequest(
        tasks=task_ids,
        policy=JobPolicy(base_url=spec.policy),
        group_size=spec.runs,
        max_retries=settings.max_retries,
        judge=settings.judge,
        allow_unjudged=True,
    )


@asynccontextmanager
async def open_stages(
    specs: Sequence[StageSpec],
    settings: RunSettings,
    on_episode: Callable[[str, Trajectory], None],
) -> AsyncIterator[dict[str, Stage]]:
    """The stages by name (each with at least one task), their workers running until the
    context exits; ``on_episode(stage, trajectory)`` as each episode ends. One runner per
    policy serves all the stages of that policy."""
    async with AsyncExitStack() as stack:
        runners: dict[str, EpisodeRunner] = {}
        stages: dict[str, Stage] = {}
        for spec in specs:
            if spec.policy not in runners:
                runners[spec.policy] = await stack.enter_async_context(
                    open_runner(
                        job_request(spec, settings, list(spec.tasks)),
                        settings.backend,
                        settings=settings.settings,
                        run_id=settings.run_id,
                        grader=settings.grader,
                        artifacts_dir=settings.artifacts_dir,
                        watcher=settings.oracle_watcher if spec.policy == "oracle" else None,
                    )
                )
            runner = runners[spec.policy]
            stages[spec.name] = await stack.enter_async_context(
                _stage(spec, settings, runner, on_episode)
            )
        yield stages


@asynccontextmanager
async def _stage(
    spec: StageSpec,
    settings: RunSettings,
    runner: EpisodeRunner,
    on_episode: Callable[[str, Trajectory], None],
) -> AsyncIterator[Stage]:
    store = await Store.open("sqlite://", finalize=finalize_group)
    woken: dict[str, asyncio.Event] = {}
    try:
        worker = Worker(
            store,
            spec.tasks,
            settings.backend,
            lambda *_: fixed_runner(runner),
            settings.worker.model_copy(update={"poll_s": min(settings.worker.poll_s, POLL_S)}),
            WorkerEvents(
                on_episode=lambda trajectory: on_episode(spec.name, trajectory),
                on_groups_ready=lambda job_id: woken.setdefault(job_id, asyncio.Event()).set(),
            ),
            slots=settings.slots,
            planner=runner.planner,
        )
        stop = asyncio.Event()
        running = asyncio.create_task(worker.run(stop=stop))
        try:
            yield Stage(spec, settings, store, worker, running, woken)
        finally:
            stop.set()
            worker.wake()
            await running
    finally:
        await store.close()
