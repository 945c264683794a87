"""A task with agent skills (``environment.skills_dir``): the built-in agent is told about them
in its instruction as Harbor's own loop is, each skill with the path of its ``SKILL.md``."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import ResolvedPolicy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task
from envfarm.testing.scripted import ScriptedResponder, tool_call
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "agent-skills"
SECTION = """
<available_skills>
  <skill>
    <name>generate-greeting</name>
    <description>Writes the greeting this task expects.</description>
    <location>/skills/generate-greeting/SKILL.md</location>
  </skill>
</available_skills>"""


async def test_the_built_in_agent_is_told_the_tasks_skills(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    responder = ScriptedResponder(
        [
            tool_call("bash", {"command": "sed -n 's/^Run `\\(.*\\)`.$/\\1/p' /skills/*/SKILL.md"}),
            tool_call("bash", {"command": 'echo "Hello from a skill" > /app/greeting.txt'}),
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
            run_id="test-agent-skills",
            artifacts_dir=tmp_path,
        )
        try:
            trajectory = await runner.run(
                EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
            )
        finally:
            await client.aclose()
    assert trajectory.error is None, trajectory.error
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0)
    first_user = next(m for m in trajectory.messages if m.get("role") == "user")
    assert str(first_user["content"]) == task.instruction + SECTION
    shown = next(m for m in trajectory.messages if m.get("role") == "tool")
    assert 'echo "Hello from a skill" > /app/greeting.txt' in str(shown["content"])
