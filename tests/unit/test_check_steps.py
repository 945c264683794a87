"""``envfarm check`` reads a multi-step task's episodes step by step (no Docker: the engine's
side is in tests/docker/test_harbor_steps.py)."""

from __future__ import annotations

from pathlib import Path

from envfarm.check.steps import StepRun, judge_steps, step_cell
from envfarm.models.trajectory import Provenance, Reward, StepResult, Trajectory
from envfarm.spec import load_task

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "harbor-steps"


def graded(value: float, **components: float) -> Reward:
    return Reward(value=value, valid=True, components={"reward": value, **components})


def episode(episode_id: str, *steps: StepResult) -> Trajectory:
    return Trajectory(
        trajectory_id=episode_id,
        episode_id=episode_id,
        job_id="j",
        group_id="g",
        task_id="fixtures/harbor-steps",
        provenance=Provenance(task_hash="h", envfarm_version="test"),
        steps=list(steps),
    )


def test_each_oracle_run_shows_where_its_steps_stopped_and_why() -> None:
    task = load_task(FIXTURE)
    whole = episode(
        "ep-whole",
        StepResult(name="create", reward=graded(1.0), stop_reason="submitted"),
        StepResult(name="extend", reward=graded(1.0), stop_reason="submitted"),
        StepResult(name="report", reward=graded(1.0), stop_reason="submitted"),
    )
    gated = episode(
        "ep-gated",
        StepResult(name="create", reward=graded(1.0), stop_reason="submitted"),
        StepResult(name="extend", reward=graded(0.25, lines=3.0), stop_reason="submitted"),
    )
    setup = episode(
        "ep-setup",
        StepResult(name="create", reward=graded(1.0), stop_reason="submitted"),
        StepResult(name="extend", reward=Reward(reason="workdir/setup.sh exited 3: no seed")),
    )
    nop = episode("ep-nop", StepResult(name="create", reward=graded(0.0), stop_reason="submitted"))
    steps, notes = judge_steps(task, [whole, gated, setup], [nop])
    table = [(s.name, " ".join(step_cell(r) for r in s.oracle), step_cell(s.nop)) for s in steps]
    assert table == [
        ("create", "1 1 1", "0"),
        ("extend", "1 0.25 none", "-"),
        ("report", "1 - -", "-"),
    ]
    assert steps[1].min_reward == {"reward": 0.5}
    assert steps[2].oracle[1] == StepRun(ran=False, reward=None)
    assert notes == [
        "oracle run 2 (ep-gated) stopped at step 'extend': below its min_reward: reward 0.25 < 0.5;"
        " not run: 'report'",
        "oracle run 3 (ep-setup) stopped at step 'extend': its setup failed (workdir/setup.sh "
        "exited 3: no seed); not run: 'report'",
    ]


def test_a_single_step_task_has_no_steps_to_show() -> None:
    task = load_task(Path(__file__).resolve().parents[2] / "tasks" / "word-count-cli")
    assert judge_steps(task, [episode("ep")], []) == ([], [])
