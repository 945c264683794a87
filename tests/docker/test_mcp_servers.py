"""A task that offers an MCP server in a sidecar (as public Harbor tasks do) runs: the server
answers from the main container under the default no-network mode, the built-in agent is told
about it in its instruction, as Harbor's own loops are, and is offered its tools as tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, ResolvedPolicy, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task
from envfarm.testing.scripted import ScriptedResponder, tool_call
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "mcp-sidecar"


async def test_the_oracle_reaches_the_sidecar_mcp_server_and_the_agent_is_told(
    tmp_path: Path,
) -> None:
    task = load_task(FIXTURE)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
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


async def test_the_built_in_agent_calls_the_servers_tool_as_a_tool(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    responder = ScriptedResponder(
        [
            tool_call("mcp__vault__fetch_code", {"label": "alpha"}),
            tool_call("mcp__vault__fetch_code", "{not json"),
            tool_call("bash", {"command": "echo OPEN-SESAME-42 > /app/code.txt"}),
            tool_call("submit", {}),
        ]
    )
    async with PolicyServer(responder) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, backoff_base_s=0.01)
        policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-mcp-tools",
            artifacts_dir=tmp_path,
        )
        try:
            trajectory = await runner.run(
                EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
            )
        finally:
            await client.aclose()
    assert trajectory.error is None, trajectory.error
    offered = [tool["function"]["name"] for tool in responder.requests[0]["tools"]]
    assert offered[-1] == "mcp__vault__fetch_code"
    assert "bash" in offered
    fetched, malformed = trajectory.turns[0].tool_results[0], trajectory.turns[1].tool_results[0]
    assert (fetched.output, fetched.error) == ("OPEN-SESAME-42", None)
    assert malformed.error is not None
    assert "not valid JSON" in malformed.output
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0)
