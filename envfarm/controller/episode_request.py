"""What the job asks of one episode (the task, its prepared image, its place in the job), who
may look into it, and the trajectory it starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import envfarm
from envfarm.agent.driven import Driver
from envfarm.errors import EnvfarmError
from envfarm.models.trajectory import Provenance, Trajectory
from envfarm.sandbox.base import PreparedImage, Sandbox
from envfarm.spec.task import Task


@dataclass(frozen=True)
class EpisodeRequest:
    task: Task
    image: PreparedImage | None
    """None when the image could not be built; ``build_error`` says why."""
    job_id: str
    group_id: str
    episode_id: str
    attempt: int = 0
    seed: int | None = None
    build_error: EnvfarmError | None = None
    driver: Driver | None = None
    """A trainer's loop sends the agent's actions (``agent/driven.py``), not a policy."""


class EpisodeWatcher(Protocol):
    """Looks into an episode's sandbox, reading only: once it is started (before the solution
    is uploaded) and once the agent has ended (before grading). ``envfarm check`` takes its
    look inside the image so (``envfarm/check/oracle_look.py``). A watcher handles its own
    errors."""

    async def before_agent(self, request: EpisodeRequest, sandbox: Sandbox) -> None: ...

    async def after_agent(
        self, request: EpisodeRequest, sandbox: Sandbox, trajectory: Trajectory
    ) -> None: ...


def blank_trajectory(request: EpisodeRequest, model: str) -> Trajectory:
    """The trajectory an episode of ``request`` starts from, before anything has run."""
    return Trajectory(
        trajectory_id=f"{request.episode_id}-a{request.attempt}",
        episode_id=request.episode_id,
        job_id=request.job_id,
        group_id=request.group_id,
        task_id=request.task.id,
        attempt=request.attempt,
        model=model,
        provenance=Provenance(
            task_hash=request.task.content_hash,
            image_id=request.image.image_id if request.image else None,
            envfarm_version=envfarm.__version__,
            seed=request.seed,
        ),
    )
