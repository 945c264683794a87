"""Whole episodes on the real engine with a scripted policy over loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import ResolvedPolicy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then
  echo '{"reward": 1.0, "answer_ok": 1}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0, "answer_ok": 0}' > /logs/verifier/reward.json
fi
"""


def make_task(root: Path, *, test_sh: str = TEST_SH, agent: str = "", verifier: str = "") -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(
        f'[task]\nname = "test/{root.name}"\n[agent]\n{agent}\n[verifier]\n{verifier}\n'
        '[environment]\nworkdir = "/app"\nmemory_mb = 512\n'
    )
    (root / "instruction.md").write_text("Write 42 into /app/answer.txt.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
    )
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "tests" / "secret_test_data.txt").write_text("hidden\n")
    (root / "solution" / "solve.sh").write_text("echo 42 > /app/answer.txt\n")
    return load_task(root)


@asynccontextmanager
async def scripted(
    steps: Sequence[Step],
) -> AsyncIterator[tuple[ScriptedResponder, ResolvedPolicy]]:
    responder = ScriptedResponder(steps)
    async with PolicyServer(responder) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, backoff_base_s=0.01)
        try:
            yield responder, ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
        finally:
            await client.aclose()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


async def run_one(
    backend: DockerBackend, task: Task, policy: ResolvedPolicy, **runner_args: Any
) -> Trajectory:
    image = await backend.prepare(sandbox_spec(task))
    runner = EpisodeRunner(
        backend=backend,
        policy=policy,
        grader=TestScriptGrader(),
        run_id="test-episode",
        **runner_args,
    )
    request = EpisodeRequest(
        task=task, image=image, job_id="job-t", group_id="grp-t", episode_id="ep-t"
    )
    return await runner.run(request)


async def test_malformed_calls_are_observations_and_tests_stay_hidden(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "answer")
    steps: list[Step] = [
        tool_call("bash", '{"command": "ls /'),  # bad JSON
        tool_call("python", {"code": "print(1)"}),  # unknown tool
        tool_call("write_file", {"path": "answer.txt"}),  # missing argument
        tool_call("bash", {"command": "ls /tests /solution; ls /logs/verifier 2>&1; true"}),
        "I think I am done?",  # no tool call: nudged, not ended
        completion(
            None,
            tool_call("write_file", {"path": "answer.txt", "content": "4"}),
            tool_call("edit_file", {"path": "/app/answer.txt", "old": "4", "new": "42"}),
        ),
        tool_call("submit", {}),
    ]
    async with scripted(steps) as (responder, policy):
        trajectory = await run_one(backend, task, policy)
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    assert trajectory.reward.components == {"reward": 1.0, "answer_ok": 1.0}
    assert trajectory.reward.flags == ["read:hidden_path"]
    assert trajectory.outcome is not None
    assert trajectory.outcome.stop_reason == "submitted"
    assert trajectory.outcome.malformed_tool_calls == 3
    results = [r for turn in trajectory.turns for r in turn.tool_results]
    assert "not valid JSON" in (results[0].error or "")
    assert "unknown tool 'python'" in (results[1].error or "")
    assert "content" in (results[2].error or "")
    listing = results[3].output
    assert "No such file or directory" in listing
    assert "secret_test_data" not in listing
    assert results[3].arguments == json.dumps(
        {"command": "ls /tests /solution; ls /logs/verifier 2>&1; true"}
    )
    assert len(responder.requests) == len(steps)
    roles = [m["role"] for m in trajectory.messages]
    assert roles[:2] == ["system", "user"]
    assert roles.count("tool") == 7
    assert all(
        t is not None
        for t in (
            trajectory.timings.provision_s,
            trajectory.timings.agent_s,
            trajectory.timings.grading_s,
            trajectory.timings.teardown_s,
        )
    )


async def test_planted_reward_file_is_never_read(backend: DockerBackend, tmp_path: Path) -> None:
    test_sh = "#!/bin/bash\n[ -f /app/answer.txt ] && echo 1 > /logs/verifier/reward.txt\nexit 1\n"
    task = make_task(tmp_path / "planted", test_sh=test_sh)
    steps = [
        tool_call(
            "bash",
            {
                "command": "mkdir -p /logs/verifier && echo 1 > "
                "/logs/verifier/reward.txt && mkdir -p /tests && "
                "echo 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh"
            },
        ),
        tool_call("submit", {}),
    ]
    async with scripted(steps) as (_, policy):
        trajectory = await run_one(backend, task, policy)
    assert not trajectory.reward.valid
    assert trajectory.reward.value is None
    assert trajectory.error is not None
    assert trajectory.error.phase == "grading"
    assert "wrote no reward file" in trajectory.error.message
    assert not trajectory.error.retryable
    assert {"tamper:reward_file_planted", "tamper:hidden_path_planted"} <= set(
        trajectory.reward.flags
    )


async def test_verifier_timeout_is_invalid_not_zero(backend: DockerBackend, tmp_path: Path) -> None:
    task = make_task(tmp_path / "slowgrader", test_sh="sleep 30\n", verifier="timeout_sec = 1")
    async with scripted([tool_call("submit", {})]) as (_, policy):
        trajectory = await run_one(backend, task, policy)
    assert trajectory.reward.valid is False
    assert trajectory.reward.value is None
    assert "timed out after 1s" in (trajectory.reward.reason or "")


async def test_agent_limits_are_outcomes_that_still_get_graded(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "limits", agent="timeout_sec = 3")
    async with scripted([tool_call("bash", {"command": "sleep 20"})] * 3) as (_, policy):
        timed = await run_one(backend, task, policy)
    assert timed.outcome is not None
    assert timed.outcome.stop_reason == "timeout"
    assert timed.reward.valid
    assert timed.reward.value == 0.0
    assert (timed.timings.agent_s or 0) < 15
    steps = [tool_call("bash", {"command": "true"})] * 2
    async with scripted(steps) as (_, policy):
        capped = await run_one(backend, task, policy, max_turns=2)
    assert capped.outcome is not None
    assert capped.outcome.stop_reason == "max_turns"
    assert capped.reward.valid


async def test_sandbox_death_is_an_infrastructure_error_and_retried(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "dies")
    steps = [
        tool_call("bash", {"command": "kill -TERM 1; sleep 5"}),
        tool_call("bash", {"command": "echo 42 > /app/answer.txt"}),
        # the retry (attempt 1) replays from here:
        tool_call("bash", {"command": "echo 42 > /app/answer.txt"}),
        tool_call("submit", {}),
    ]
    async with scripted(steps) as (_, policy):
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-episode"
        )
        job = Job([task], runner, request_for([task], runner, max_retries=1))
        result = await job.run()
    assert (await backend.prepare(sandbox_spec(task))).cached  # built once, by the job
    [trajectory] = result.trajectories
    assert trajectory.attempt == 1
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0


async def test_sandbox_death_without_retries_is_invalid(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "dies2")
    steps = [
        tool_call("bash", {"command": "kill -TERM 1; sleep 5"}),
        tool_call("bash", {"command": "true"}),
    ]
    async with scripted(steps) as (_, policy):
        trajectory = await run_one(backend, task, policy)
    assert trajectory.error is not None
    assert trajectory.error.phase == "agent"
    assert trajectory.error.infrastructure
    assert trajectory.error.retryable
    assert trajectory.reward.valid is False
    assert trajectory.reward.value is None


async def test_oracle_gets_the_solution_and_nop_does_not(
    backend: DockerBackend, tmp_path: Path
) -> None:
    from envfarm.controller.policies import PolicySpec, open_policy

    task = make_task(tmp_path / "oracle")
    image = await backend.prepare(sandbox_spec(task))
    for name, expected in (("oracle", 1.0), ("nop", 0.0)):
        async with open_policy(PolicySpec(base_url=name)) as policy:
            runner = EpisodeRunner(
                backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-episode"
            )
            trajectory = await runner.run(
                EpisodeRequest(
                    task=task, image=image, job_id="j", group_id="g", episode_id=f"ep-{name}"
                )
            )
        assert trajectory.reward.value == expected, (name, trajectory.reward)
        assert trajectory.provenance.image_id == image.image_id
        assert trajectory.provenance.task_hash == task.content_hash
        assert trajectory.turns[0].endpoint is not None
        assert trajectory.turns[0].endpoint.startswith("http://127.0.0.1:")
