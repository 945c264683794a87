"""Recompute a finished run's rewards from its stored artifacts, without rerunning any agent.

For every trajectory whose verifier ran (``artifacts/<episode_id>/verifier.json`` exists), the
reward is computed again by the same code as in the run (``verdict.score``) from the kept
``/logs/verifier`` files, with the task's *current* ``task.toml`` (its ``fail_to_pass`` lists,
reports and flag policy may have changed) and the flags the run observed (``inspection.json``).
Rubric scores are recombined from the judge calls recorded in the trajectory; a task whose
rubric items were never judged keeps its reward. Group advantages and the summary are then
recomputed. Everything else in each trajectory line keeps its JSON value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envfarm.controller.groups import assign_advantages
from envfarm.controller.summary import RunSummary, summarize
from envfarm.errors import GradingError, TaskSpecError
from envfarm.grading.artifacts import (
    EPISODE_FILE,
    load_inspection,
    load_record,
    load_verifier_output,
)
from envfarm.grading.rubric.scoring import FLAG_GATED, combine
from envfarm.grading.verifier.verdict import expected_reports, finish_reward, score
from envfarm.models.trajectory import ErrorInfo, Reward, Trajectory
from envfarm.plan.planner import plan_episode
from envfarm.spec.task import Task, discover_tasks, load_task

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"


@dataclass
class Change:
    episode_id: str
    task_id: str
    before: Reward
    after: Reward

    @property
    def changed(self) -> bool:
        return (self.before.value, self.before.valid, sorted(self.before.flags)) != (
            self.after.value,
            self.after.valid,
            sorted(self.after.flags),
        )


@dataclass
class Regrade:
    lines: list[str] = field(default_factory=list)
    summary: RunSummary | None = None
    changes: list[Change] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Episode id -> why its reward was kept as it was."""
    problems: dict[str, str] = field(default_factory=dict)
    """Task path or id -> why its tasks could not be loaded."""


class _Tasks:
    """Tasks by id: from ``--task`` paths when given, else from the directories the run used."""

    def __init__(self, paths: list[Path] | None, problems: dict[str, str]) -> None:
        self.by_id: dict[str, Task] = {}
        self.explicit = paths is not None
        self.problems = problems
        if paths is not None:
            tasks, errors = discover_tasks(paths)
            self.by_id = {task.id: task for task in tasks}
            problems.update({error.path: str(error) for error in errors})

    def get(self, task_id: str, root: str) -> Task | None:
        if task_id not in self.by_id and not self.explicit and task_id not in self.problems:
            try:
                task = load_task(Path(root))
            except TaskSpecError as exc:
                self.problems[task_id] = str(exc)
                return None
            if task.id != task_id:
                self.problems[task_id] = f"{root} now holds task {task.id!r}"
                return None
            self.by_id[task_id] = task
        return self.by_id.get(task_id)


def _rubric(tests: Reward, task: Task, trajectory: Trajectory) -> Reward | None:
    """The rubric combination again, from the recorded judge calls; None when not possible."""
    items = task.config.verifier.rubrics
    if not items or not tests.valid:
        return tests
    scoring = task.config.verifier.rubric
    if scoring.min_tests_reward is not None and (tests.value or 0.0) < scoring.min_tests_reward:
        return combine(tests, scoring, items, {}, [FLAG_GATED])
    scores = {c.item: c.score for c in trajectory.judge_calls if c.score is not None}
    if any(item.name not in scores for item in items):
        return None
    return combine(tests, scoring, items, {k: v for k, v in scores.items() if v is not None})


def _regrade_one(
    out: Path, trajectory: Trajectory, tasks: _Tasks
) -> tuple[Reward, ErrorInfo | None] | str:
    """The new reward and error, or why the trajectory keeps its reward."""
    root = out / (trajectory.artifacts or f"artifacts/{trajectory.episode_id}")
    if not (root / EPISODE_FILE).is_file():
        return "no artifacts were kept (the episode ended before grading, or the run kept none)"
    try:
        record = load_record(root)
        output = load_verifier_output(root)
        inspection = load_inspection(root)
    except (OSError, ValidationError, ValueError) as exc:
        return f"no usable artifacts in {root}: {exc}"
    if output is None:
        return "the verifier never ran in this episode"
    if record.trajectory_id != trajectory.trajectory_id:
        return f"the artifacts belong to attempt {record.trajectory_id}"
    task = tasks.get(trajectory.task_id, record.task_root)
    if task is None:
        return f"task {trajectory.task_id!r} could not be loaded"
    config = task.config.verifier
    observed = inspection.flags if inspection else []
    try:
        scored = score(output, config, expected_reports(plan_episode(task).verifier))
        combined = _rubric(scored, task, trajectory)
    except GradingError as exc:
        reward = finish_reward(Reward(reason=f"grading failed: {exc}"), observed, [])
        return reward, ErrorInfo(type="GradingError", message=str(exc), phase="grading")
    if combined is None:
        return "its rubric items were never judged; regrading would need a judge"
    return finish_reward(combined, observed, config.zero_on_flags, scored), None


def _read_summary(out: Path) -> dict[str, Any]:
    try:
        data = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def regrade_run(out: Path, task_paths: list[Path] | None = None) -> Regrade:
    """Regrade the run in ``out``; raise ``OSError`` when it has no trajectories file."""
    result = Regrade()
    tasks = _Tasks(task_paths, result.problems)
    raws: list[dict[str, Any]] = []
    trajectories: list[Trajectory] = []
    for number, line in enumerate((out / TRAJECTORIES).read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        raws.append(raw)
        try:
            trajectories.append(Trajectory.model_validate(raw))
        except ValidationError as exc:
            raise ValueError(f"{out / TRAJECTORIES} line {number}: {exc}") from exc
    for trajectory in trajectories:
        before = trajectory.reward
        regraded = _regrade_one(out, trajectory, tasks)
        if isinstance(regraded, str):
            result.skipped[trajectory.episode_id] = regraded
            continue
        trajectory.reward, trajectory.error = regraded
        result.changes.append(
            Change(trajectory.episode_id, trajectory.task_id, before, regraded[0])
        )
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    for group in groups.values():
        for trajectory in group:
            trajectory.advantage = trajectory.group_zero_variance = None
        assign_advantages(group)
    for raw, trajectory in zip(raws, trajectories, strict=True):
        dumped = trajectory.model_dump(mode="json", by_alias=True)
        for key in ("reward", "error", "advantage", "group_zero_variance"):
            raw[key] = dumped[key]
        result.lines.append(json.dumps(raw, separators=(",", ":"), ensure_ascii=False))
    old = _read_summary(out)
    result.summary = summarize(
        trajectories,
        job_id=str(old.get("job_id", "")),
        policy=str(old.get("policy", "")),
        model=str(old.get("model", "")),
        bad_inputs=dict(old.get("bad_inputs") or {}),
        duration_s=float(old.get("duration_s") or 0.0),
    )
    return result
