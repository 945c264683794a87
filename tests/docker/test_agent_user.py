"""The agent's user (``[agent] user``, else the image's ``USER``, else root) on the real engine:
its commands and its file tools act with that user's permissions, root-owned paths stay out of
reach, and the verifier still runs as its own user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import ResolvedPolicy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import ToolResult, Trajectory
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.scripted import ScriptedResponder, tool_call
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

DOCKERFILE = """FROM debian:bookworm-slim
RUN useradd --uid 1234 --create-home agent && mkdir -p /app && chown agent /app \\
 && echo topsecretvalue > /root/secret && chmod 600 /root/secret
WORKDIR /app
"""
TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
owner=$(stat -c %u /app/answer.txt)
echo "{\\"reward\\": $([ "$(cat /app/answer.txt)" = 42 ] && echo 1 || echo 0), \\
\\"owner\\": $owner, \\"verifier_uid\\": $(id -u)}" > /logs/verifier/reward.json
"""
STEPS = [
    tool_call("bash", {"command": "id -u; id -un; echo $HOME"}),
    tool_call("bash", {"command": "touch /etc/planted"}),
    tool_call("write_file", {"path": "/etc/planted", "content": "x"}),
    tool_call("read_file", {"path": "/root/secret"}),
    tool_call("write_file", {"path": "answer.txt", "content": "42"}),
    tool_call("bash", {"command": "ls -l /etc/planted 2>&1; stat -c %U answer.txt"}),
    tool_call("submit", {}),
]


def make_task(root: Path, *, agent: str = "", dockerfile: str = DOCKERFILE) -> Task:
    files = {
        "task.toml": f'[task]\nname = "test/{root.name}"\n[agent]\n{agent}\n'
        '[verifier]\nenvironment_mode = "shared"\n[environment]\nworkdir = "/app"\n',
        "instruction.md": "Write 42 into /app/answer.txt.\n",
        "environment/Dockerfile": dockerfile,
        "tests/test.sh": TEST_SH,
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return load_task(root)


async def run_scripted(task: Task) -> tuple[Trajectory, list[ToolResult]]:
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with PolicyServer(ScriptedResponder(STEPS)) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, backoff_base_s=0.01)
        try:
            policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
            runner = EpisodeRunner(
                backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-user"
            )
            trajectory = await runner.run(
                EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
            )
        finally:
            await client.aclose()
    assert trajectory.error is None, trajectory.error
    return trajectory, [r for turn in trajectory.turns for r in turn.tool_results]


def assert_confined(results: list[ToolResult]) -> None:
    whoami, touch, write, read, answer, check = results[:6]
    assert whoami.output.splitlines()[:3] == ["1234", "agent", "/home/agent"]
    assert touch.exit_code == 1
    assert "Permission denied" in touch.output
    assert write.error is not None
    assert "Permission denied" in write.error
    assert read.error is not None
    assert "Permission denied" in read.error
    assert "topsecretvalue" not in read.output
    assert answer.error is None
    assert "No such file" in check.output
    assert check.output.splitlines()[1] == "agent"


async def test_configured_agent_user_is_confined(tmp_path: Path) -> None:
    trajectory, results = await run_scripted(
        make_task(tmp_path / "as-agent", agent='user = "agent"')
    )
    assert_confined(results)
    assert trajectory.reward.value == 1.0
    assert trajectory.reward.components == {"reward": 1.0, "owner": 1234.0, "verifier_uid": 0.0}


async def test_numeric_agent_user(tmp_path: Path) -> None:
    task = make_task(tmp_path / "as-uid", agent="user = 1234")
    assert task.config.agent.user == "1234"
    trajectory, results = await run_scripted(task)
    assert_confined(results)
    assert trajectory.reward.components["owner"] == 1234.0


async def test_image_user_is_the_default(tmp_path: Path) -> None:
    task = make_task(tmp_path / "image-user", dockerfile=f"{DOCKERFILE}USER agent\n")
    trajectory, results = await run_scripted(task)
    assert_confined(results)
    assert trajectory.reward.value == 1.0


async def test_root_when_nobody_is_named(tmp_path: Path) -> None:
    trajectory, results = await run_scripted(make_task(tmp_path / "as-root"))
    whoami, touch, write, read = results[:4]
    assert whoami.output.splitlines()[:2] == ["0", "root"]
    assert (touch.exit_code, write.error, read.output) == (0, None, "topsecretvalue\n")
    assert json.dumps(trajectory.reward.components) == json.dumps(
        {"reward": 1.0, "owner": 0.0, "verifier_uid": 0.0}
    )
