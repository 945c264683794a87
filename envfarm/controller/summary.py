"""What a run amounts to: the ``summary.json`` shape and the exit status it implies."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from envfarm.models.trajectory import Trajectory

EXIT_OK, EXIT_INFRA, EXIT_BAD_INPUT = 0, 1, 2


class TaskSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: int = 0
    completed: int = 0
    """Episodes that ended with a valid reward (whatever its value)."""
    infra_errors: int = 0
    mean_reward: float | None = None
    """Mean over the valid rewards; null when there are none."""
    retries: int = 0
    steps: dict[str, float | None] | None = None
    """A multi-step task's steps: each one's mean over its valid rewards (null: never graded)."""


class RunSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    policy: str
    model: str
    episodes: int
    completed: int
    infra_errors: int
    mean_reward: float | None
    tasks: dict[str, TaskSummary]
    bad_inputs: dict[str, str]
    """Task path or id -> why it could not run (bad spec, unknown base image)."""
    duration_s: float
    exit_code: int
    token_reasks: int = 0
    """Turns whose first answer came without its token data and were asked again
    (``turns[].token_reask``)."""
    turns_without_token_data: int = 0
    """Turns kept without token data because their answers lacked it even when asked again
    (``turns[].token_source_reason``); their trajectories stay valid."""


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(
    trajectories: Iterable[Trajectory],
    *,
    job_id: str,
    policy: str,
    model: str,
    bad_inputs: dict[str, str],
    duration_s: float,
) -> RunSummary:
    tasks: dict[str, TaskSummary] = {}
    rewards: dict[str, list[float]] = {}
    steps: dict[str, dict[str, list[float]]] = {}
    for trajectory in trajectories:
        for step in trajectory.steps:
            graded = steps.setdefault(trajectory.task_id, {}).setdefault(step.name, [])
            if step.reward.valid and step.reward.value is not None:
                graded.append(step.reward.value)
        task = tasks.setdefault(trajectory.task_id, TaskSummary())
        task.episodes += 1
        task.retries += trajectory.attempt
        reward = trajectory.reward
        if reward.valid and reward.value is not None:
            task.completed += 1
            rewards.setdefault(trajectory.task_id, []).append(reward.value)
        elif trajectory.error is None or trajectory.error.infrastructure:
            task.infra_errors += 1
    for task_id, task in tasks.items():
        task.mean_reward = _mean(rewards.get(task_id, []))
        if task_id in steps:
            task.steps = {name: _mean(values) for name, values in steps[task_id].items()}
    episodes = sum(t.episodes for t in tasks.values())
    completed = sum(t.completed for t in tasks.values())
    infra = sum(t.infra_errors for t in tasks.values())
    refused = any(  # the task's configuration, refused by the backend: fails the same again
        t.error is not None
        and not t.error.infrastructure
        and t.error.phase in ("build", "provision")
        for t in trajectories
    )
    if bad_inputs or refused:
        exit_code = EXIT_BAD_INPUT
    elif completed < episodes:
        exit_code = EXIT_INFRA
    else:
        exit_code = EXIT_OK
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    return RunSummary(
        job_id=job_id,
        policy=policy,
        model=model,
        episodes=episodes,
        completed=completed,
        infra_errors=infra,
        mean_reward=_mean([r for values in rewards.values() for r in values]),
        tasks=dict(sorted(tasks.items())),
        bad_inputs=bad_inputs,
        duration_s=duration_s,
        exit_code=exit_code,
        token_reasks=sum(1 for turn in turns if turn.token_reask is not None),
        turns_without_token_data=sum(1 for turn in turns if turn.token_source_reason is not None),
    )
