"""A task that offers an MCP server in a sidecar (as public Harbor tasks do) runs: the server
answers from the main container under the default no-network mode, and the built-in agent is
told about it in its instruction, as Harbor's own loops are."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "mcp-sidecar"


async def test_the_oracle_reaches_the_sidecar_mcp_server_and_the_agent_is_told(
    tmp_path: Path,
) -> None:
    task = load_task(FIXTURE)
    backend = DockerBackend()
    image = await backend.prepare(task)
    async with open_policy(PolicySpec(target="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-mcp-sidecar",
            artifacts_dir=tmp_path,
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    stdout = (tmp_path / "ep" / "verifier" / "test-stdout.txt").read_text()
    assert trajectory.error is None, trajectory.error
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0), stdout
    first_user = next(m for m in trajectory.messages if m.get("role") == "user")
    assert str(first_user["content"]).endswith(
        "MCP Servers:\nThe following MCP servers are available for this task.\n"
        "- vault: streamable-http transport, url: http://vault:8000/mcp\n"
    )
