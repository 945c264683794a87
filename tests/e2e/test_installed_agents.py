"""Installed agents through `envfarm run`: mini-swe-agent from PyPI driven by the fake vLLM
server with each task's oracle solution, in no-network sandboxes, every turn token-exact."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from envfarm.policy import PolicyServer
from envfarm.testing.agent_scripts import mini_swe_agent_planner, oracle_commands
from envfarm.testing.fake_vllm import FakeVLLM

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
MINI_TASKS = ["fix-lru-cache"]
"""One task in the suite: the agent's layer is a ~1 GB pip install per task image."""


async def envfarm(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "envfarm",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=3000)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


def sent_tokens(fake: FakeVLLM) -> set[tuple[tuple[int, ...], tuple[float, ...]]]:
    return {
        (
            tuple(reply.body["choices"][0]["token_ids"]),
            tuple(c["logprob"] for c in reply.body["choices"][0]["logprobs"]["content"]),
        )
        for reply in fake.replies
        if isinstance(reply.body, dict)
    }


@pytest.mark.timeout(1800)  # the first episode per task image builds the agent's layer
@pytest.mark.parametrize("task", MINI_TASKS)
async def test_mini_swe_agent_solves_the_task_token_exact(task: str, tmp_path: Path) -> None:
    fake = FakeVLLM(
        planner=mini_swe_agent_planner(oracle_commands(REPO / "tasks" / task)), version="7"
    )
    out = tmp_path / "out"
    async with PolicyServer(fake) as server:
        code, stderr = await envfarm(
            "run",
            f"tasks/{task}",
            "--policy",
            server.base_url,
            "--model",
            "m",
            "--agent",
            "mini-swe-agent",
            "--out",
            str(out),
        )
    assert code == 0, stderr[-3000:]
    [trajectory] = [
        json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert trajectory["error"] is None, trajectory["error"]
    assert trajectory["reward"]["value"] == 1.0, trajectory["reward"]
    assert trajectory["agent"]["name"] == "mini-swe-agent"
    assert trajectory["agent"]["version"] == "2.4.6"
    assert trajectory["outcome"]["stop_reason"] == "submitted"
    turns = trajectory["turns"]
    assert len(turns) == len(fake.replies) == 2
    recorded = {(tuple(t["completion_token_ids"]), tuple(t["logprobs"])) for t in turns}
    assert recorded == sent_tokens(fake)
    assert all(t["policy_version"] == "7" for t in turns)
    # the agent's own messages: its system prompt, the task, its tool calls and their results
    messages = trajectory["messages"]
    assert messages[0]["role"] == "system"
    assert any(m["role"] == "tool" for m in messages)
    # the agent used the job's sampling, not its own
    assert all(r.get("temperature") == 1.0 or "temperature" not in r for r in fake.requests)


async def test_unknown_agent_exits_2_listing_the_agents() -> None:
    code, _stderr = await envfarm(
        "run", "tasks/fix-lru-cache", "--policy", "oracle", "--agent", "nope"
    )
    assert code == 2
