"""An installed agent's job through `envfarm serve`, consumed by the Python client: the
trajectories a trainer receives carry the agent's name and version and every turn's token
ids exactly as the model server sent them, in groups with their advantages."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from envfarm.client import EnvfarmClient
from envfarm.models.jobs import DeliveredGroup
from envfarm.policy import PolicyServer
from envfarm.testing.agent_scripts import oracle_planner
from envfarm.testing.fake_vllm import FakeVLLM
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
TASK = "fix-lru-cache"


@pytest.mark.timeout(2400)  # the agent's layer is built unless an earlier test left it
async def test_an_installed_agent_job_reaches_a_trainer_client_token_exact(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(REPO / "tasks" / TASK, tasks / TASK)
    fake = FakeVLLM(planner=oracle_planner("mini-swe-agent", [tasks / TASK]), version="3")
    args = ["--tasks", str(tasks), "--data-dir", str(tmp_path / "data"), "--concurrency", "2"]
    async with PolicyServer(fake) as policy:
        server = ServeProcess(tmp_path, *args).start()
        try:
            async with EnvfarmClient(server.url) as client:
                job_id = await client.submit(
                    {
                        "tasks": [f"envfarm/{TASK}"],
                        "policy": {"base_url": policy.base_url, "model": "m"},
                        "group_size": 2,
                        "agent": "mini-swe-agent",
                    }
                )
                groups = await asyncio.wait_for(_consume(client, job_id), timeout=2000)
                view = await client.job(job_id)
        finally:
            assert server.stop() == 0, server.output()
    assert view.status == "completed", server.output()
    [group] = groups
    assert len(group.trajectories) == 2
    sent = {
        (
            tuple(reply.body["prompt_token_ids"]),
            tuple(reply.body["choices"][0]["token_ids"]),
            tuple(c["logprob"] for c in reply.body["choices"][0]["logprobs"]["content"]),
        )
        for reply in fake.replies
        if isinstance(reply.body, dict)
    }
    received = []
    for trajectory in group.trajectories:
        assert trajectory["schema"] == "envfarm.trajectory/1"
        assert trajectory["agent"]["name"] == "mini-swe-agent"
        assert trajectory["agent"]["version"] == "2.4.6"
        assert trajectory["reward"]["value"] == 1.0, trajectory["reward"]
        assert trajectory["advantage"] == 0.0  # both solved: the group's rewards do not vary
        assert trajectory["policy_versions"] == {"min": "3", "max": "3"}
        received += [
            (tuple(t["prompt_token_ids"]), tuple(t["completion_token_ids"]), tuple(t["logprobs"]))
            for t in trajectory["turns"]
        ]
    assert len(received) == len(fake.replies)
    assert set(received) == sent


async def _consume(client: EnvfarmClient, job_id: str) -> list[DeliveredGroup]:
    return [group async for group in client.groups(job_id, wait_s=5.0)]
