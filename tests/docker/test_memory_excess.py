"""The model's own excess is the model's outcome: a solution whose child asks for 2 GiB under
``memory_mb = 512`` loses that child, not the sandbox; the episode is graded, under runc (the
kernel's OOM killer takes the command, never the helper) and under gVisor (each command's
address space is capped at the task's memory, so the child gets ENOMEM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.planning import Planner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.settings import current
from envfarm.spec.task import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
answer=$(cat /app/answer.txt 2>/dev/null)
hog=$(cat /app/hog_exit 2>/dev/null || echo missing)
reward=$([ "$answer" = 42 ] && echo 1 || echo 0)
failed=$([ "$hog" != 0 ] && [ "$hog" != missing ] && echo 1 || echo 0)
echo "{\\"reward\\": $reward, \\"hog_failed\\": $failed}" > /logs/verifier/reward.json
"""
# dd's buffer is the whole block: one process touching 2 GiB.
SOLVE_SH = """dd if=/dev/zero of=/dev/null bs=2047M count=1 2>/dev/null
echo $? > /app/hog_exit
echo 42 > /app/answer.txt
"""


def make_task(root: Path) -> Path:
    files = {
        "task.toml": f'[task]\nname = "test/{root.name}"\n[verifier]\n'
        'environment_mode = "shared"\n[environment]\nworkdir = "/app"\nmemory_mb = 512\n',
        "instruction.md": "Write 42 into /app/answer.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n",
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": SOLVE_SH,
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


@pytest.mark.parametrize("runtime", [None, "runsc"], ids=["runc", "gvisor"])
async def test_a_child_over_the_memory_limit_is_the_agents_outcome(
    tmp_path: Path, runtime: str | None
) -> None:
    task = load_task(make_task(tmp_path / f"memory-excess-{runtime or 'runc'}"))
    backend = DockerBackend()
    planner = Planner(backend, current().with_flags(runtime=runtime))
    image = await backend.prepare((await planner.plan(task)).sandbox)
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-memory",
            planner=planner,
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid, trajectory.reward
    assert trajectory.reward.components["hog_failed"] == 1
    assert trajectory.reward.value == 1
