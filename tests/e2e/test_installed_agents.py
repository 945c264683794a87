"""Installed agents through `envfarm run`: mini-swe-agent from PyPI and Codex CLI from npm,
driven by the fake vLLM server with each task's oracle solution in the agent's own format, in
no-network sandboxes, every turn token-exact. Two tasks per agent here (every task: the
bench/installed_agents.py run, results in bench/RESULTS.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from envfarm.policy import PolicyServer
from envfarm.spec.task import load_task
from envfarm.testing.agent_scripts import oracle_planner
from envfarm.testing.fake_vllm import FakeVLLM
from tests.e2e.cli import envfarm

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
AGENT_TASKS = {
    "mini-swe-agent": ("2.4.6", ["fix-lru-cache", "jq-log-summary"]),
    "codex": ("0.169.0", ["fix-lru-cache", "bash-find-duplicates"]),
}
"""Each agent layer is a large install per task image (mini-swe-agent ~700 MB of pip
packages, Codex ~420 MB of native binaries): two tasks each, one of them without Python."""


def sent_tokens(fake: FakeVLLM) -> Counter[tuple[tuple[int, ...], tuple[float, ...]]]:
    return Counter(
        (
            tuple(reply.body["choices"][0]["token_ids"]),
            tuple(c["logprob"] for c in reply.body["choices"][0]["logprobs"]["content"]),
        )
        for reply in fake.replies
        if isinstance(reply.body, dict)
    )


def recorded_tokens(
    trajectories: list[dict[str, Any]],
) -> Counter[tuple[tuple[int, ...], tuple[float, ...]]]:
    return Counter(
        (tuple(t["completion_token_ids"]), tuple(t["logprobs"]))
        for trajectory in trajectories
        for t in trajectory["turns"]
    )


@pytest.mark.timeout(2400)  # the first episode per task image builds the agent's layer
@pytest.mark.parametrize("agent", sorted(AGENT_TASKS))
async def test_installed_agent_solves_tasks_token_exact(agent: str, tmp_path: Path) -> None:
    version, tasks = AGENT_TASKS[agent]
    task_dirs = [REPO / "tasks" / task for task in tasks]
    for task_dir in task_dirs:
        assert load_task(task_dir).config.environment.network_mode in (None, "no-network")
    fake = FakeVLLM(planner=oracle_planner(agent, task_dirs), version="7")
    out = tmp_path / "out"
    async with PolicyServer(fake) as server:
        code, stderr = await envfarm(
            "run",
            *(f"tasks/{task}" for task in tasks),
            "--policy",
            server.base_url,
            "--model",
            "m",
            "--agent",
            agent,
            "--concurrency",
            "2",
            "--out",
            str(out),
            timeout=3000,
        )
    assert code == 0, stderr[-3000:]
    trajectories = [
        json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert sorted(t["task_id"] for t in trajectories) == sorted(f"envfarm/{t}" for t in tasks)
    for trajectory in trajectories:
        assert trajectory["error"] is None, trajectory["error"]
        assert trajectory["reward"]["value"] == 1.0, (trajectory["task_id"], trajectory["reward"])
        assert trajectory["agent"]["name"] == agent
        assert trajectory["agent"]["version"] == version
        assert trajectory["outcome"]["stop_reason"] == "submitted"
        assert len(trajectory["turns"]) >= 2
        assert all(t["policy_version"] == "7" for t in trajectory["turns"])
        # the agent's own messages: its system prompt, the task, its tool calls and results
        messages = trajectory["messages"]
        assert messages[0]["role"] == "system"
        assert any(m["role"] == "tool" for m in messages)
    # every model call is one turn, and its token ids and logprobs are those the server sent
    assert sum(len(t["turns"]) for t in trajectories) == len(fake.replies)
    assert recorded_tokens(trajectories) == sent_tokens(fake)
    # the agent used the job's sampling, not its own
    assert all(r.get("temperature") == 1.0 or "temperature" not in r for r in fake.requests)


async def test_unknown_agent_exits_2_listing_the_agents() -> None:
    code, stderr = await envfarm(
        "run", "tasks/fix-lru-cache", "--policy", "oracle", "--agent", "nope"
    )
    assert code == 2
    assert "codex" in stderr
    assert "mini-swe-agent" in stderr
