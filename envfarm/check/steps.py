"""A multi-step task's steps in ``envfarm check``'s verdict: each step's oracle and nop reward.

The episode's reward is one number made from the steps' (``controller/steps.py``), so an oracle
that misses the maximum does not say which step it missed, nor that the steps stopped early. The
verdict therefore keeps, per declared step, what each oracle run and the nop run got there
(``StepCheck``), and says where an oracle run's steps stopped: at a step whose reward fell below
its ``min_reward`` (Harbor's gate), or whose setup or healthcheck failed. Nop stopping at the
first gate is what a sound task does, so nop's stop is shown in its rewards only, never
explained. A step's rewards are read from ``trajectory.steps``: a declared step missing there
did not run.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envfarm.controller.steps import STEP_NOT_GRADED
from envfarm.models.trajectory import StepResult, Trajectory
from envfarm.spec.task import Task


class StepRun(BaseModel):
    """One step in one episode."""

    model_config = ConfigDict(extra="forbid")

    ran: bool = False
    """False: the steps stopped before this one."""
    reward: float | None = None
    """The step's reward; None when it has no valid one (not run, or not graded)."""


class StepCheck(BaseModel):
    """One declared step: its gate, and what the oracle's runs and nop got there."""

    model_config = ConfigDict(extra="forbid")

    name: str
    min_reward: float | dict[str, float] | None = None
    oracle: list[StepRun] = Field(default_factory=list)
    """Per oracle run, in the order of ``TaskCheck.oracle_rewards``."""
    nop: StepRun | None = None
    """None: nop gave no episode."""


def judge_steps(
    task: Task, oracle: list[Trajectory], nop: list[Trajectory]
) -> tuple[list[StepCheck], list[str]]:
    """Each declared step's rewards in the episodes, and where each oracle run that stopped
    early stopped (nothing for a single-step task)."""
    if not task.steps:
        return [], []
    checks = [StepCheck(name=s.name, min_reward=s.config.min_reward) for s in task.steps]
    for trajectory in oracle:
        for step, run in zip(checks, step_runs(task, trajectory), strict=True):
            step.oracle.append(run)
    for trajectory in nop[:1]:
        for step, run in zip(checks, step_runs(task, trajectory), strict=True):
            step.nop = run
    notes = []
    for number, trajectory in enumerate(oracle, start=1):
        stop = stopped(task, trajectory)
        if stop is not None:
            which = f"oracle run {number}" if len(oracle) > 1 else "oracle"
            notes.append(f"{which} ({trajectory.episode_id}) {stop}")
    return checks, notes


def step_runs(task: Task, trajectory: Trajectory) -> list[StepRun]:
    """Each declared step's run in ``trajectory``, in the task's order."""
    results = {result.name: result for result in trajectory.steps}
    runs = []
    for step in task.steps:
        result = results.get(step.name)
        if result is None:
            runs.append(StepRun())
            continue
        reward = result.reward
        runs.append(StepRun(ran=True, reward=reward.value if reward.valid else None))
    return runs


def stopped(task: Task, trajectory: Trajectory) -> str | None:
    """Where the episode's steps stopped before the last one, and why; None: they did not."""
    done, error = trajectory.steps, trajectory.error
    if not done or len(done) >= len(task.steps) or (error and error.type != STEP_NOT_GRADED):
        return None
    last = done[-1]
    skipped = ", ".join(repr(s.name) for s in task.steps[len(done) :])
    return f"stopped at step {last.name!r}: {_why(task, last)}; not run: {skipped}"


def _why(task: Task, result: StepResult) -> str:
    if result.stop_reason is None:
        return f"its setup failed ({result.reward.reason or 'no reason given'})"
    gate = next(s.config.min_reward for s in task.steps if s.name == result.name)
    value = result.reward.value
    if isinstance(gate, dict):
        have = {**result.reward.components, "reward": value}
        short = []
        for key, low in gate.items():
            got = have.get(key)
            if got is None or got < low:
                short.append(f"{key} {_num(got)} < {low:.3g}")
        return f"below its min_reward: {', '.join(short)}"
    shown = "no valid reward" if value is None else f"its reward {value:.3g}"
    return f"{shown}, below its min_reward {_num(gate)}"


def _num(value: float | None) -> str:
    return "none" if value is None else f"{value:.3g}"


def step_cell(run: StepRun | None) -> str:
    """A step's reward in one episode as the verdict's table shows it: ``-`` not run,
    ``none`` no valid reward."""
    if run is None or not run.ran:
        return "-"
    return "none" if run.reward is None else f"{run.reward:.3g}"
