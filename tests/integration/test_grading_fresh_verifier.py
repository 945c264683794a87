"""A separate verifier on the fake backend: the tests run in a fresh sandbox, not the agent's."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import ExecResult, PreparedImage, Sandbox
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ok
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")


class PassingTests(FakeBackend):
    """Every sandbox's tests/test.sh writes a reward of 1 into that sandbox."""

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        sandbox = super().create(spec, image, run_id=run_id)
        assert isinstance(sandbox, FakeSandbox)

        def handler(command: str, sandbox: FakeSandbox = sandbox) -> ExecResult:
            if "/tests/test.sh" in command:
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n"
            return ok()

        sandbox.handler = handler
        return sandbox


def make_task(root: Path, mode: str) -> Task:
    for part in ("environment", "tests", "solution"):
        (root / part).mkdir(parents=True)
    (root / "task.toml").write_text(f'[verifier]\nenvironment_mode = "{mode}"\n')
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "solution" / "solve.sh").write_text("true\n")
    return load_task(root)


async def run(task: Task, backend: FakeBackend) -> Trajectory:
    async with open_policy(PolicySpec(base_url="nop")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="fork"
        )
        image = await backend.prepare(sandbox_spec(task))
        request = EpisodeRequest(
            task=task, image=image, job_id="j", group_id="g", episode_id="ep-fork"
        )
        return await runner.run(request)


async def test_a_separate_verifier_runs_in_a_fresh_sandbox_and_both_are_stopped(
    tmp_path: Path,
) -> None:
    backend = PassingTests()
    trajectory = await run(make_task(tmp_path / "separate", "separate"), backend)
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0), trajectory.error
    agent, verifier = backend.created
    assert isinstance(agent, FakeSandbox)
    assert isinstance(verifier, FakeSandbox)
    assert agent.fresh_verifiers == [verifier]
    assert not any("/tests/test.sh" in c for c in agent.commands)
    assert any("/tests/test.sh" in c for c in verifier.commands)
    assert not agent.running
    assert not verifier.running


async def test_shared_mode_grades_in_the_agent_sandbox(tmp_path: Path) -> None:
    backend = PassingTests()
    trajectory = await run(make_task(tmp_path / "shared", "shared"), backend)
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0)
    [agent] = backend.created
    assert any("/tests/test.sh" in c for c in agent.commands)
