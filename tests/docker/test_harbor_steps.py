"""Harbor's multi-step tasks on the real engine: the steps run in order in one sandbox, each
graded by its own tests; the oracle reaches the maximum, nop does not, ``min_reward`` ends the
steps early, and the trajectory's ``steps`` split its turns; ``envfarm check`` shows each step's
oracle and nop rewards, and where a gate stopped the oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.check.steps import StepRun
from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, ResolvedPolicy, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.scripted import ScriptedResponder, tool_call
from tests.e2e.cli import envfarm
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "harbor-steps"


async def run_episode(task: Task, policy: ResolvedPolicy, episode_id: str) -> Trajectory:
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    runner = EpisodeRunner(
        backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-steps"
    )
    request = EpisodeRequest(
        task=task, image=image, job_id="j", group_id="g", episode_id=episode_id
    )
    return await runner.run(request)


async def test_the_oracle_reaches_the_maximum_step_by_step() -> None:
    task = load_task(FIXTURE)
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        trajectory = await run_episode(task, policy, "ep-steps-oracle")
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid, trajectory.reward
    assert trajectory.reward.value == 1.0, trajectory.reward
    assert trajectory.reward.flags == []
    assert trajectory.reward.components == {"reward": 1.0, "lines": 2 / 3}
    steps = [(s.name, s.reward.value, s.first_turn, s.last_turn) for s in trajectory.steps]
    assert steps == [("create", 1.0, 0, 1), ("extend", 1.0, 2, 3), ("report", 1.0, 4, 5)]
    assert all(s.stop_reason == "submitted" for s in trajectory.steps)
    assert trajectory.steps[-1].reward.components == {"reward": 1.0, "lines": 2.0}
    asked = [m["content"] for m in trajectory.messages if m["role"] == "user"]
    assert asked == [step.instruction for step in task.steps]


async def test_nop_stops_at_the_first_gate() -> None:
    task = load_task(FIXTURE)
    async with open_policy(PolicySpec(base_url="nop")) as policy:
        trajectory = await run_episode(task, policy, "ep-steps-nop")
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid
    assert trajectory.reward.value == 0.0
    assert [(s.name, s.reward.value) for s in trajectory.steps] == [("create", 0.0)]


async def test_a_step_below_its_minimum_ends_the_steps_with_the_mean_so_far(
    tmp_path: Path,
) -> None:
    root = tmp_path / "steps"
    shutil.copytree(FIXTURE, root)
    task = load_task(root)
    script = [
        tool_call("bash", {"command": "echo alpha > /app/stack.txt"}),
        tool_call("submit", {}),
        tool_call("bash", {"command": "ls /tests /logs/verifier; cat seed.txt"}),
        tool_call("submit", {}),
    ]
    async with PolicyServer(ScriptedResponder(script)) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, backoff_base_s=0.01)
        try:
            policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
            trajectory = await run_episode(task, policy, "ep-steps-gate")
        finally:
            await client.aclose()
    assert trajectory.error is None, trajectory.error
    assert [(s.name, s.reward.value) for s in trajectory.steps] == [
        ("create", 1.0),
        ("extend", 0.0),
    ]
    assert trajectory.reward.value == 0.5
    looked = trajectory.turns[2].tool_results[0].output
    assert "/tests" in looked
    assert "test.sh" not in looked
    assert "lib.sh" not in looked
    assert "reward" not in looked
    assert "beta" in looked  # the step's workdir arrived


async def test_check_calls_the_multi_step_fixture_sound(tmp_path: Path) -> None:
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks(
        [load_task(FIXTURE)], [], DockerBackend(), TestScriptGrader(), config
    )
    (check,) = report.checks
    assert check.problems == [], check.notes
    assert check.oracle_rewards == [1.0]
    assert check.nop_reward == 0.0
    assert check.verdict == "sound"
    shown = [(s.name, [r.reward for r in s.oracle], s.nop) for s in check.steps]
    assert shown == [
        ("create", [1.0], StepRun(ran=True, reward=0.0)),
        ("extend", [1.0], StepRun()),
        ("report", [1.0], StepRun()),
    ]
    assert check.notes == []  # nop stopping at the first gate needs no explaining


async def test_check_shows_each_step_and_where_the_oracle_stopped(tmp_path: Path) -> None:
    root = tmp_path / "gated"
    shutil.copytree(FIXTURE, root)
    (root / "steps" / "extend" / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho gamma >> /app/stack.txt\n"
    )
    code, out = await envfarm("check", str(root), "--runs", "1")
    assert code == 2, out
    rows = {
        line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    }
    assert rows["step create"][2:4] == ["1", "0"], out
    assert rows["step extend"][2:4] == ["0", "-"], out
    assert rows["step report"][2:4] == ["-", "-"], out
    assert "oracle fails: the oracle reaches 0.5, not the maximum 1" in out
    stop = "stopped at step 'extend': below its min_reward: reward 0 < 0.5; not run: 'report'"
    assert stop in out
    assert "steps stopped before the last one" in out
