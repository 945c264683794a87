"""One job over two sandbox backends through the real Worker (fake sandboxes, in-process
policy, a SQLite store): losing a whole backend mid-job returns its episodes to the queue as
lost attempts, and every episode is graded once, on the backend still in service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import ResolvedPolicy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import ExecResult, PreparedImage, Sandbox
from envfarm.sandbox.placement.backend import PlacedBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ok
from envfarm.testing.scripted_client import ScriptedPolicyClient

pytestmark = pytest.mark.asyncio(loop_scope="function")
EPISODES = 8


def make_task(root: Path) -> Task:
    for sub in ("environment", "tests"):
        (root / sub).mkdir(parents=True)
    (root / "task.toml").write_text(
        '[verifier]\nenvironment_mode = "shared"\n[environment]\nworkdir = "/app"\n'
    )
    (root / "instruction.md").write_text("Run a command, then submit.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


class Cluster(FakeBackend):
    """Fake sandboxes whose tests pass; with ``hang``, the agent's commands never return (the
    backend is dying) and ``hanging`` counts them."""

    def __init__(self, *, hang: bool = False) -> None:
        super().__init__()
        self.hang = hang
        self.hanging = 0
        self.stuck = asyncio.Event()
        self.graded = 0
        self.prepared = 0

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        self.prepared += 1
        return await super().prepare(spec)

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        sandbox = super().create(spec, image, run_id=run_id)
        assert isinstance(sandbox, FakeSandbox)

        async def handler(command: str, sandbox: FakeSandbox = sandbox) -> ExecResult:
            if "/tests/test.sh" in command:
                self.graded += 1
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n"
            elif self.hang and command.strip() == "true":
                self.hanging += 1
                if self.hanging == 2:
                    self.stuck.set()
                await asyncio.Event().wait()
            return ok()

        sandbox.handler = handler
        return sandbox


async def test_a_lost_backend_returns_its_episodes_and_each_is_graded_once(
    tmp_path: Path,
) -> None:
    task = make_task(tmp_path / "task")
    healthy, dying = Cluster(), Cluster(hang=True)
    placed = PlacedBackend({"healthy": (healthy, 3), "dying": (dying, 3)})
    client = ScriptedPolicyClient(1)
    policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
    runner = EpisodeRunner(
        backend=placed, policy=policy, grader=TestScriptGrader(), run_id="placed"
    )
    request = request_for([task], runner, group_size=EPISODES, max_retries=2)
    job = Job([task], runner, request, worker=WorkerConfig(concurrency=6))
    running = asyncio.create_task(job.run())
    await asyncio.wait_for(dying.stuck.wait(), 120)
    held = placed.lose("dying")
    result = await asyncio.wait_for(running, 300)

    assert held >= 2
    assert len(result.trajectories) == EPISODES
    assert all(t.reward.valid and t.reward.value == 1.0 for t in result.trajectories)
    reruns = [t for t in result.trajectories if t.attempt > 0]
    assert len(reruns) == held  # each episode the lost backend held ran once more
    assert healthy.graded == EPISODES  # every episode graded once, where it ran to the end
    assert dying.graded == 0
    assert placed.placer.slots["dying"].in_use == 0
    assert placed.placer.slots["healthy"].in_use == 0  # every slot given back
    assert healthy.prepared == 1  # the image was built once on the backend and reused
