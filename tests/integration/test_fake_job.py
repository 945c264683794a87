"""The controller end to end over the fake backend: no engine, real policy HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from envfarm.controller.assembly import open_runner
from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.groups import finalize_group
from envfarm.controller.job import Job, JobEvents, request_for
from envfarm.controller.planning import PLAN_FILE
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.controller.worker import Worker, WorkerConfig
from envfarm.errors import PolicyConfigError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Trajectory
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import ExecResult, PreparedImage
from envfarm.store.store import Store
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ok
from tests.fake_tasks import shared_task

pytestmark = pytest.mark.asyncio(loop_scope="session")


def grading_handler(backend_box: list[FakeSandbox], reward: bytes) -> Callable[[str], ExecResult]:
    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            sandbox = backend_box[-1]
            sandbox.files["/logs/verifier/reward.txt"] = reward
        return ok()

    return handler


async def test_group_of_fake_episodes_runs_grades_and_gets_advantages(tmp_path: Path) -> None:
    task = shared_task(tmp_path / "t")
    backend = FakeBackend()
    backend.handler = grading_handler(backend.created, b"1\n")
    seen: list[list[str]] = []
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="fake"
        )
        job = Job(
            [task],
            runner,
            request_for([task], runner, group_size=3),
            JobEvents(on_group=lambda g: seen.append([t.episode_id for t in g])),
            worker=WorkerConfig(concurrency=1),
        )
        result = await job.run()
    assert len(result.trajectories) == 3
    assert [len(g) for g in seen] == [3]
    assert all(t.reward.value == 1.0 and t.reward.valid for t in result.trajectories)
    assert all(t.advantage == 0.0 and t.group_zero_variance for t in result.trajectories)
    commands = backend.created[0].commands
    assert any("/solution" in c for c in commands)  # the oracle's solution was uploaded
    assert "bash /solution/solve.sh" in commands
    assert all(not s.running for s in backend.created)  # every sandbox was stopped


async def test_every_episode_leaves_its_plan_with_its_artifacts(tmp_path: Path) -> None:
    task = shared_task(tmp_path / "t")
    backend = FakeBackend()
    backend.handler = grading_handler(backend.created, b"1\n")
    request = JobRequest(
        tasks=[task.id],
        policy=JobPolicy(base_url="oracle"),
        group_size=2,
        verifier_network="none",
        runtime="fast",
    )
    async with open_runner(
        request, backend, run_id="fake", artifacts_dir=tmp_path / "artifacts"
    ) as runner:
        result = await Job([task], runner, request).run()
    for trajectory in result.trajectories:
        plan = json.loads((tmp_path / "artifacts" / trajectory.episode_id / PLAN_FILE).read_text())
        assert (plan["schema"], plan["episode_id"]) == ("envfarm.plan/1", trajectory.episode_id)
        assert plan["sandbox"]["runtime"] == "fast"
        assert plan["decided"]["sandbox.runtime"]["source"] == "job"
        assert plan["decided"]["verifier.network"]["source"] == "task"  # shared: the task's
        assert plan["verifier"]["mode"] == "shared"
    assert {spec.runtime for spec in backend.specs} == {"fast"}


async def test_missing_reward_is_invalid_and_not_retried(tmp_path: Path) -> None:
    task = shared_task(tmp_path / "t")
    backend = FakeBackend()
    async with open_policy(PolicySpec(base_url="nop")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="fake"
        )
        result = await Job([task], runner, request_for([task], runner, max_retries=2)).run()
    [trajectory] = result.trajectories
    assert trajectory.reward.valid is False
    assert trajectory.attempt == 0
    assert len(backend.created) == 1
    assert trajectory.error is not None
    assert trajectory.error.phase == "grading"


class BrokenBuilds(FakeBackend):
    """A backend whose image builds fail with a foreign (non-envfarm) error."""

    prepared = 0

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        self.prepared += 1
        raise RuntimeError("the engine said something unexpected")


async def test_a_foreign_build_failure_is_an_invalid_build_error_not_a_hang(tmp_path: Path) -> None:
    task = shared_task(tmp_path / "t")
    backend = BrokenBuilds()
    async with open_policy(PolicySpec(base_url="nop")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="fake"
        )
        request = request_for([task], runner, group_size=2)
        job = Job([task], runner, request, worker=WorkerConfig(build_retry_s=0.05))
        result = await asyncio.wait_for(job.run(), 60)
    assert len(result.trajectories) == 2
    for trajectory in result.trajectories:
        assert trajectory.error is not None
        assert trajectory.error.phase == "build"
        assert "something unexpected" in trajectory.error.message
        assert trajectory.reward.valid is False
    assert backend.created == []
    assert backend.prepared == 3  # an infrastructure failure is built again, up to 3 times


async def test_a_job_whose_policy_cannot_be_opened_ends_with_that_reason(tmp_path: Path) -> None:
    task = shared_task(tmp_path / "t")
    store = await Store.open("sqlite://", finalize=finalize_group)
    request = JobRequest(
        tasks=[task.id], policy=JobPolicy(base_url="http://nowhere/v1"), group_size=2
    )
    job_id = await store.create_job(request, {task.id: task.content_hash})

    @asynccontextmanager
    async def runners(*_: object) -> AsyncIterator[EpisodeRunner]:
        raise PolicyConfigError("model 'm' is not served by http://nowhere/v1")
        yield

    worker = Worker(store, {task.id: task}, FakeBackend(), runners, WorkerConfig(poll_s=0.05))
    try:
        await asyncio.wait_for(worker.run(job_id=job_id), 60)
        ended = [Trajectory.model_validate(t) for t in await store.trajectories(job_id)]
        view = await store.job(job_id)
    finally:
        await store.close()
    assert view.status == "completed"
    assert len(ended) == 2
    for trajectory in ended:
        assert trajectory.error is not None
        assert trajectory.error.type == "PolicyConfigError"
        assert "not served" in trajectory.error.message
        assert trajectory.attempt == 0  # a configuration error is not retried
        assert trajectory.reward.valid is False


async def test_open_runner_removes_sandboxes_after_results_and_drains_on_exit(
    tmp_path: Path,
) -> None:
    from envfarm.controller.assembly import open_runner

    task = shared_task(tmp_path / "t")
    backend = FakeBackend()
    backend.handler = grading_handler(backend.created, b"1\n")
    request = JobRequest(tasks=[task.id], policy=JobPolicy(base_url="oracle"), group_size=3)
    # one at a time: the handler writes the reward into the newest sandbox
    async with open_runner(request, backend, run_id="bg") as runner:
        assert runner.background_teardown
        job = Job([task], runner, request, worker=WorkerConfig(concurrency=1))
        result = await job.run()
        assert [t.error for t in result.trajectories] == [None, None, None]
        assert [t.timings.teardown_s for t in result.trajectories] == [0.0, 0.0, 0.0]
        assert all(t.reward.value == 1.0 for t in result.trajectories)
    assert len(backend.created) == 3
    assert all(sandbox._stopped for sandbox in backend.created)
