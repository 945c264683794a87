"""A turn whose answers lacked their token data, through the controller over the fake backend.

The policy is resolved as the CLI resolves it and served by the fake vLLM server on loopback,
which omits the token data of chosen answers (``omit``: as if the request had not asked for it)
or sends inconsistent data (``mismatch``: one logprob short).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.controller.summary import RunSummary, summarize
from envfarm.controller.training_data import TOKEN_FAULT_FLAG
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.samples import merged_samples
from envfarm.models.trajectory import Trajectory
from envfarm.policy import PolicyServer
from envfarm.sandbox.base import ExecResult
from envfarm.testing.fake_sandbox import FakeBackend, ok
from envfarm.testing.fake_vllm import FakeVLLM, FaultKind
from tests.fake_tasks import shared_task

pytestmark = pytest.mark.asyncio(loop_scope="session")

COMMANDS = ["ls", "pwd"]
"""Three turns: two commands, then submit."""


async def run_one(tmp_path: Path, faults: dict[int, FaultKind]) -> tuple[Trajectory, RunSummary]:
    """One graded episode (reward 1) against the fake server with ``faults``, and its summary."""
    task = shared_task(tmp_path / "t")
    backend = FakeBackend()

    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            backend.created[-1].files["/logs/verifier/reward.txt"] = b"1\n"
        return ok()

    backend.handler = handler
    fake = FakeVLLM(commands=COMMANDS, faults=faults)
    async with (
        PolicyServer(fake) as server,
        open_policy(PolicySpec(base_url=server.base_url, model="m")) as policy,
    ):
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="tokens"
        )
        job = Job([task], runner, request_for([task], runner), worker=WorkerConfig(concurrency=1))
        result = await job.run()
    (trajectory,) = result.trajectories
    summary = summarize(
        result.trajectories, job_id="j", policy="p", model="m", bad_inputs={}, duration_s=0.0
    )
    return trajectory, summary


async def test_a_turn_still_without_token_data_is_kept_and_the_trajectory_graded(
    tmp_path: Path,
) -> None:
    trajectory, summary = await run_one(tmp_path, {1: "omit", 2: "omit"})
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    assert TOKEN_FAULT_FLAG not in trajectory.reward.flags
    first, missing, last = trajectory.turns
    assert missing.token_source == "none"
    assert missing.faults == []
    assert missing.prompt_token_ids is missing.completion_token_ids is missing.logprobs is None
    assert "prompt_token_ids is missing" in (missing.token_reask or "")
    assert "still lacked" in (missing.token_source_reason or "")
    assert missing.attempts == 2
    assert (first.token_source, last.token_source) == ("vllm", "vllm")
    assert [s.turns for s in merged_samples(trajectory)] == [[0], [2]]
    assert (summary.token_reasks, summary.turns_without_token_data) == (1, 1)
    assert summary.exit_code == 0


async def test_a_turn_whose_data_came_when_asked_again_merges_as_any_other(
    tmp_path: Path,
) -> None:
    trajectory, summary = await run_one(tmp_path, {1: "omit"})
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    assert [t.token_source for t in trajectory.turns] == ["vllm"] * 3
    assert trajectory.turns[1].token_reask is not None
    assert [s.turns for s in merged_samples(trajectory)] == [[0, 1, 2]]
    assert (summary.token_reasks, summary.turns_without_token_data) == (1, 0)


async def test_inconsistent_token_data_still_makes_the_trajectory_invalid(tmp_path: Path) -> None:
    trajectory, summary = await run_one(tmp_path, {1: "mismatch"})
    assert trajectory.reward.valid is False
    assert trajectory.reward.value is None
    assert TOKEN_FAULT_FLAG in trajectory.reward.flags
    assert trajectory.error is not None
    assert trajectory.error.type == "TokenDataError"
    assert trajectory.turns[1].token_reask is None
    assert (summary.token_reasks, summary.infra_errors, summary.exit_code) == (0, 1, 1)
