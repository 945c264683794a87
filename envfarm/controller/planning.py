"""A job's planner: the engine's facts asked once, each task's plan made once.

The rules are ``envfarm.plan.planner``'s (pure); this holds what they are applied to: the
settings the process runs with, the job's own choices (``JobRequest``'s ``verifier_network``
and ``runtime``, its turns and context budget) and the backend's facts.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from envfarm.models.jobs import JobRequest
from envfarm.plan.models import EngineFacts, EpisodePlan, JobChoices
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.base import SandboxBackend
from envfarm.settings import Settings, current
from envfarm.spec.task import Task

PLAN_FILE = "plan.json"


def job_choices(request: JobRequest) -> JobChoices:
    return JobChoices(
        verifier_network=request.verifier_network,
        sidecar_network=request.sidecar_network,
        runtime=request.runtime,
        request_ratio=request.request_ratio,
        realism=request.realism,
        fork=request.fork,
        group_size=request.group_size,
        max_turns=request.max_turns,
        context_budget=request.context_budget,
    )


class Planner:
    def __init__(
        self,
        backend: SandboxBackend,
        settings: Settings | None = None,
        job: JobChoices | None = None,
    ) -> None:
        self.backend = backend
        self.settings = current() if settings is None else settings
        self.job = job or JobChoices()
        self._facts: EngineFacts | None = None
        self._plans: dict[int, tuple[Task, EpisodePlan]] = {}
        """By the task object: a check's mode variants share a root and a content hash."""
        self._lock = asyncio.Lock()

    def for_job(self, job: JobChoices) -> Planner:
        """A planner of the same process and engine for another job's choices."""
        planner = Planner(self.backend, self.settings, job)
        planner._facts = self._facts
        return planner

    async def facts(self) -> EngineFacts:
        if self._facts is None:
            async with self._lock:
                if self._facts is None:
                    self._facts = await self.backend.facts()
        return self._facts

    def planned(self, task: Task) -> EpisodePlan | None:
        """``task``'s plan when it has been made (by ``plan``)."""
        found = self._plans.get(id(task))
        return found[1] if found is not None and found[0] is task else None

    async def plan(self, task: Task) -> EpisodePlan:
        """``task``'s plan in this job; EnvironmentUnsupported when it cannot run here."""
        found = self.planned(task)
        if found is None:
            found = plan_episode(task, self.job, self.settings, await self.facts())
            self._plans[id(task)] = (task, found)
        return found


def write_plan(plan: EpisodePlan, episode_id: str, root: Path) -> None:
    """``root/plan.json``: the plan, with the episode it was made for."""
    root.mkdir(parents=True, exist_ok=True)
    data = json.loads(plan.to_json())
    (root / PLAN_FILE).write_text(
        json.dumps({"episode_id": episode_id, **data}, indent=2) + "\n", encoding="utf-8"
    )
