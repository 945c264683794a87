"""Exact token data, routed experts and policy versions through whole episodes.

A real sandbox on the engine, the fake vLLM/SGLang server on loopback, the policy resolved by
``open_policy`` as the CLI and API do: what the trajectory says must be what the server sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import pytest_asyncio

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, ResolvedPolicy, open_policy
from envfarm.controller.training_data import TOKEN_FAULT_FLAG
from envfarm.controller.versions import PolicyVersionBoard
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.samples import merged_samples
from envfarm.models.trajectory import Trajectory
from envfarm.policy import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_vllm import FakeVLLM, Fault, command_planner
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

COMMANDS = ["echo 42 > /app/answer.txt", "cat /app/answer.txt"]
TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
[ "$(cat /app/answer.txt 2>/dev/null)" = "42" ] && echo 1 > /logs/verifier/reward.txt \
  || echo 0 > /logs/verifier/reward.txt
"""


def make_task(root: Path) -> Task:
    for sub in ("environment", "tests", "solution"):
        (root / sub).mkdir(parents=True)
    (root / "task.toml").write_text(
        f'[task]\nname = "test/{root.name}"\n[environment]\nworkdir = "/app"\nmemory_mb = 512\n'
    )
    (root / "instruction.md").write_text("Write 42 into /app/answer.txt.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
    )
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "solution" / "solve.sh").write_text("echo 42 > /app/answer.txt\n")
    return load_task(root)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("tokens") / "answer")


@asynccontextmanager
async def policy_for(
    fake: FakeVLLM, board: PolicyVersionBoard | None = None, **spec: Any
) -> AsyncIterator[ResolvedPolicy]:
    async with PolicyServer(fake) as server:
        fields = {"base_url": server.base_url, "model": "m", **spec}
        async with open_policy(PolicySpec.model_validate(fields), board) as policy:
            yield policy


async def run_episode(backend: DockerBackend, task: Task, policy: ResolvedPolicy) -> Trajectory:
    runner = EpisodeRunner(
        backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-tokens"
    )
    request = EpisodeRequest(
        task=task,
        image=await backend.prepare(sandbox_spec(task)),
        job_id="job-t",
        group_id="grp-t",
        episode_id="ep-t",
    )
    return await runner.run(request)


def written(trajectory: Trajectory, **output: bool) -> dict[str, Any]:
    """The trajectory as a trainer reads it from trajectories.jsonl."""
    written: dict[str, Any] = json.loads(trajectory.to_json(**output))
    return written


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
async def test_trajectory_tokens_equal_what_the_server_sent(
    backend: DockerBackend, task: Task, dialect: Literal["vllm", "sglang"]
) -> None:
    fake = FakeVLLM(dialect=dialect, commands=COMMANDS, routed_experts=True, version="3")
    async with policy_for(fake, routed_experts=True) as policy:
        trajectory = await run_episode(backend, task, policy)
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    data = written(trajectory, samples=True)
    assert len(data["turns"]) == len(fake.replies) == 3
    for turn, reply in zip(data["turns"], fake.replies, strict=True):
        body = reply.body
        assert isinstance(body, dict)
        choice = body["choices"][0]
        assert turn["token_source"] == dialect
        assert turn["faults"] == []
        assert turn["prompt_token_ids"] == (
            body["prompt_token_ids"] if dialect == "vllm" else choice["prompt_token_ids"]
        )
        assert turn["completion_token_ids"] == choice["token_ids"]
        assert turn["logprobs"] == [c["logprob"] for c in choice["logprobs"]["content"]]
        routed = turn["routed_experts"]
        if dialect == "sglang":
            assert routed["data"] == choice["meta_info"]["routed_experts"]
        else:
            raw = base64.b64decode(choice["routed_experts"])
            payload = raw[10 + int.from_bytes(raw[8:10], "little") :]
            assert base64.b64decode(routed["data"]) == payload
        assert turn["policy_version"] == "3"
    (sample,) = data["samples"]
    assert sample["turns"] == [0, 1, 2]
    last = data["turns"][-1]
    assert sample["token_ids"] == last["prompt_token_ids"] + last["completion_token_ids"]
    assert sum(sample["loss_mask"]) == sum(len(t["completion_token_ids"]) for t in data["turns"])
    assert trajectory.turns[1].prompt_token_ids is None  # compact in memory
    assert trajectory.turns[1].prompt_suffix_ids is not None


async def test_versions_follow_a_mid_run_weight_swap(backend: DockerBackend, task: Task) -> None:
    fake = FakeVLLM(commands=COMMANDS, version="7")
    plan = command_planner(COMMANDS)

    def swap_after_first_turn(request: dict[str, Any]) -> Any:
        fake.version = "7" if len(fake.requests) == 1 else "8"
        return plan(request)

    fake.planner = swap_after_first_turn
    async with policy_for(fake, server_profile="vllm") as policy:
        trajectory = await run_episode(backend, task, policy)
    assert trajectory.reward.valid
    assert [t.policy_version for t in trajectory.turns] == ["7", "8", "8"]
    assert {t.policy_version_source for t in trajectory.turns} == {"header"}
    assert (trajectory.policy_versions.min, trajectory.policy_versions.max) == ("7", "8")


async def test_sglang_version_spans_of_a_turn_that_spanned_a_swap(
    backend: DockerBackend, task: Task
) -> None:
    fake = FakeVLLM(
        dialect="sglang",
        commands=COMMANDS,
        version="1",
        faults={1: Fault(kind="swap", version="2")},
    )
    async with policy_for(fake) as policy:
        trajectory = await run_episode(backend, task, policy)
    first, swapped, last = trajectory.turns
    assert (first.policy_version, swapped.policy_version, last.policy_version) == ("1", "2", "2")
    spans = [(s.version, s.start, s.end) for s in swapped.policy_version_spans or []]
    assert spans == [("1", 0, 1), ("2", 1, len(swapped.completion_token_ids or []))]
    assert swapped.policy_version_source == "response"


async def test_published_versions_stamp_turns_the_server_does_not_version(
    backend: DockerBackend, task: Task
) -> None:
    board = PolicyVersionBoard()
    board.publish("run-a")
    fake = FakeVLLM(commands=COMMANDS, version_header=None)
    plan = command_planner(COMMANDS)

    def publish_after_first_turn(request: dict[str, Any]) -> Any:
        if len(fake.requests) == 2:
            board.publish("run-b")
        return plan(request)

    fake.planner = publish_after_first_turn
    async with policy_for(fake, board) as policy:
        trajectory = await run_episode(backend, task, policy)
    assert [t.policy_version for t in trajectory.turns] == ["run-a", "run-b", "run-b"]
    assert {t.policy_version_source for t in trajectory.turns} == {"published"}
    assert (trajectory.policy_versions.min, trajectory.policy_versions.max) == ("run-a", "run-b")


async def test_mismatched_lengths_are_a_fault_that_invalidates_the_reward(
    backend: DockerBackend, task: Task
) -> None:
    fake = FakeVLLM(commands=COMMANDS, faults={1: "mismatch"})
    async with policy_for(fake) as policy:
        trajectory = await run_episode(backend, task, policy)
    faulty = trajectory.turns[1]
    assert faulty.faults
    assert "logprobs" in faulty.faults[0]
    assert faulty.completion_token_ids is not None
    assert faulty.logprobs is not None
    assert len(faulty.logprobs) == len(faulty.completion_token_ids) - 1
    assert trajectory.reward.valid is False
    assert trajectory.reward.value is None
    assert TOKEN_FAULT_FLAG in trajectory.reward.flags
    assert trajectory.error is not None
    assert trajectory.error.type == "TokenDataError"
    assert [s.turns for s in merged_samples(trajectory)] == [[0], [2]]


async def test_a_turn_without_token_data_is_kept_and_the_reward_stays_valid(
    backend: DockerBackend, task: Task
) -> None:
    fake = FakeVLLM(commands=COMMANDS, faults={1: "omit", 2: "omit"})
    async with policy_for(fake) as policy:
        trajectory = await run_episode(backend, task, policy)
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    kept = trajectory.turns[1]
    assert kept.token_source == "none"
    assert kept.faults == []
    assert kept.token_reask is not None
    assert kept.token_source_reason is not None
    assert kept.completion_token_ids is None
    assert [s.turns for s in merged_samples(trajectory)] == [[0], [2]]


async def test_openai_profile_records_text_only(backend: DockerBackend, task: Task) -> None:
    fake = FakeVLLM(commands=COMMANDS, version_header=None)
    async with policy_for(fake, server_profile="openai") as policy:
        trajectory = await run_episode(backend, task, policy)
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    assert {t.token_source for t in trajectory.turns} == {"none"}
    assert all(t.prompt_token_ids is None and t.logprobs is None for t in trajectory.turns)
    assert (trajectory.policy_versions.min, trajectory.policy_versions.max) == (None, None)
    assert "return_token_ids" not in fake.requests[0]
