"""Sessions driven by a trainer's loop (the step API): ``reset``, one action per ``step``.

A session is an ordinary episode of one task, in a one-episode job of its own whose policy is
``driven``: the worker leases it to itself as it creates it (so no other worker runs it), holds
one of its ``concurrency`` slots for it, renews its lease and records its trajectory, which the
store, the viewer and the trainer's group stream then hold like any other. The episode runs the
same provisioning, tamper snapshots, clean-room grading and teardown as ``envfarm run``; only its
actions come from the session (``agent/driven.py``). The action that ends the agent phase
(``submit``, or the task's turn or time limit) answers once the episode is graded and recorded.

Abandoning (the trainer's connection closed, ``close`` before ``submit``, a new ``reset``, or
idleness that the API layer times) ends the agent phase without grading: the trajectory is
recorded with ``error.type == "SessionAbandoned"``, an invalid reward, and the actions taken.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envfarm.agent.driven import Driver, Opening
from envfarm.controller.policies import DRIVEN_POLICY
from envfarm.controller.worker import Worker
from envfarm.errors import EnvfarmError, SessionEnded, UnknownTask
from envfarm.models.jobs import JobPolicy, JobRequest, Sampling
from envfarm.models.trajectory import ToolResult, Trajectory
from envfarm.spec.task import Task


class SessionStartError(EnvfarmError):
    """The session's environment could not be made ready; the message says why."""


@dataclass
class Step:
    """One action's answer: the tool's result; when the action ended the session, the
    recorded trajectory too."""

    result: ToolResult
    trajectory: Trajectory | None = None


@dataclass
class Session:
    task: Task
    job_id: str
    episode_id: str
    opening: Opening
    driver: Driver
    steps: int = 0
    trajectory: Trajectory | None = None

    @property
    def done(self) -> bool:
        return self.trajectory is not None or self.driver.ended

    async def step(self, tool: str, arguments: dict[str, Any] | str) -> Step:
        """Run one action. When it ends the session (``submit``, a limit) the answer waits for
        grading; an action that arrives after the agent phase ended by itself (its time ran
        out, its environment failed) is not run and gets the episode's end instead."""
        if self.trajectory is not None:
            raise SessionEnded("the session has ended: reset to start another")
        self.steps += 1
        try:
            result, stop = await self.driver.act(tool, arguments)
        except SessionEnded as exc:
            self.trajectory = await self.driver.finished
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            return Step(ToolResult(call_id="", name=tool, arguments=raw, output="", error=str(exc)),
                        self.trajectory)  # fmt: skip
        if stop is None:
            return Step(result)
        self.trajectory = await self.driver.finished
        return Step(result, self.trajectory)

    async def abandon(self, reason: str) -> Trajectory | None:
        """End the session ungraded, if it has not ended; the recorded trajectory, if any."""
        if self.trajectory is None:
            self.driver.abandon(reason)
            try:
                self.trajectory = await self.driver.finished
            except SessionEnded:
                return None
        return self.trajectory

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "job_id": self.job_id,
            "task": self.task.id,
            "step_count": self.steps,
            "done": self.done,
        }


@dataclass
class Sessions:
    """Opens sessions on a worker, from the server's task library."""

    worker: Worker
    tasks: Mapping[str, Task]

    async def open(
        self, task_id: str | None, *, seed: int | None = None, model: str | None = None
    ) -> Session:
        task = self._task(task_id)
        request = JobRequest(
            tasks=[task.id],
            policy=JobPolicy(base_url=DRIVEN_POLICY, model=model),
            sampling=Sampling(seed=seed),
            max_retries=0,
            name=f"session {task.id}",
        )
        return await self.start(task, request)

    async def start(self, task: Task, request: JobRequest) -> Session:
        """A session of ``task`` as ``request`` (a one-task job of the ``driven`` policy,
        never retried) asks, once its environment is ready (``envfarm audit`` sets its own
        turn limit and realism so)."""
        driver = Driver()
        lease = await self.worker.drive(task, request, driver)
        waits: set[asyncio.Future[Any]] = {asyncio.shield(driver.opened),
                                           asyncio.shield(driver.finished)}  # fmt: skip
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            driver.abandon("the trainer left while its environment was starting")
            raise
        finally:
            for wait in waits:
                wait.cancel()
        if not driver.opened.done():
            trajectory = await driver.finished
            reason = trajectory.error.message if trajectory.error else trajectory.reward.reason
            raise SessionStartError(f"task {task.id!r}: the environment did not start: {reason}")
        return Session(task, lease.job_id, lease.episode_id, driver.opened.result(), driver)

    def _task(self, task_id: str | None) -> Task:
        if task_id is None:
            if len(self.tasks) == 1:
                return next(iter(self.tasks.values()))
            raise UnknownTask(
                f"reset needs `task`: one of the server's {len(self.tasks)} tasks (GET /v1/tasks)",
                field="task",
            )
        task = self.tasks.get(task_id)
        if task is None:  # a name without its namespace, when only one task has it
            named = [t for key, t in self.tasks.items() if key.rpartition("/")[2] == task_id]
            task = named[0] if len(named) == 1 else None
        if task is None:
            raise UnknownTask(
                f"unknown task {task_id!r}: the server knows {len(self.tasks)} tasks "
                "(GET /v1/tasks)",
                field="task",
            )
        return task
