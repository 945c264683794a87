"""Two episodes whose first turns start together, through the controller over the fake backend.

The policy is resolved as the CLI resolves it (``--server-profile auto``) and served by the fake
engine on loopback, whose own API answers the profile probe late. This is issue 40's run:
against llama.cpp, one episode of each concurrent pair used to go out before the probe answered,
with the fallback fields, and ended invalid for want of logprobs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import PolicySpec, ResolvedPolicy, open_policy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.policy.base import Completion, PolicyClient, SamplingParams
from envfarm.sandbox.base import ExecResult
from envfarm.testing.fake_engine import EngineDialect, FakeEngine
from envfarm.testing.fake_sandbox import FakeBackend, ok
from envfarm.testing.scripted import tool_call
from tests.detection import assert_settled_before_any_request
from tests.fake_tasks import shared_task

pytestmark = pytest.mark.asyncio(loop_scope="session")


def rewarding(backend: FakeBackend) -> None:
    """Every run of tests/test.sh leaves reward 1 (in every sandbox: episodes run at once)."""

    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            for sandbox in backend.created:
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n"
        return ok()

    backend.handler = handler


class FirstTurns(PolicyClient):
    """A policy client that sets ``began`` once ``expected`` sessions have begun their first
    request. Awaiting it resumes only after the last of them ran up to its first wait: then
    each request either waits for the probe or has been encoded and is on its way."""

    def __init__(self, inner: PolicyClient, expected: int) -> None:
        self.inner, self.expected = inner, expected
        self.begun: set[str] = set()
        self.began = asyncio.Event()

    def session(self, key: str) -> PolicyClient:
        return _Session(self, key)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: SamplingParams
    ) -> Completion:
        return await self.inner.complete(messages, tools, sampling)


class _Session(PolicyClient):
    def __init__(self, parent: FirstTurns, key: str) -> None:
        self.parent, self.key = parent, key
        self.inner = parent.inner.session(key)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: SamplingParams
    ) -> Completion:
        self.parent.begun.add(self.key)
        if len(self.parent.begun) == self.parent.expected:
            self.parent.began.set()
        return await self.inner.complete(messages, tools, sampling)


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm", "sglang", "openai"])
async def test_episodes_starting_together_all_use_the_probed_profile(
    tmp_path: Path, dialect: EngineDialect
) -> None:
    task = shared_task(tmp_path / "t")
    backend = FakeBackend()
    rewarding(backend)
    gate = asyncio.Event()
    steps = [tool_call("submit", {})] * 2
    async with (
        FakeEngine(steps, dialect=dialect, probe_gate=gate) as engine,
        open_policy(PolicySpec(base_url=engine.base_url, model="fake")) as policy,
    ):
        client = FirstTurns(policy.client, expected=2)
        resolved = ResolvedPolicy(client, policy.name, policy.model, needs_solution=False)
        runner = EpisodeRunner(
            backend=backend, policy=resolved, grader=TestScriptGrader(), run_id="race"
        )
        request = request_for([task], runner, group_size=2)
        job = asyncio.create_task(
            Job([task], runner, request, worker=WorkerConfig(concurrency=2)).run()
        )
        await client.began.wait()
        await engine.probing.wait()  # the probe is at the server, and held there
        gate.set()
        result = await job
    assert len(result.trajectories) == 2
    expected = "openai" if dialect == "openai" else dialect
    for trajectory in result.trajectories:
        assert trajectory.error is None, trajectory.error
        assert trajectory.reward.valid
        assert trajectory.reward.value == 1.0
        (turn,) = trajectory.turns
        assert turn.server_profile == expected
        assert turn.faults == []
        if dialect != "openai":
            assert turn.token_source == dialect
            assert turn.completion_token_ids is not None
            assert turn.logprobs is not None
            assert len(turn.logprobs) == len(turn.completion_token_ids)
    assert_settled_before_any_request(engine, dialect)
