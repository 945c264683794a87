"""The model's own excess is the model's outcome, for processes and disk as for memory
(test_memory_excess.py): a solution that forks until the limit refuses, or fills the
container's disk quota, and leaves it so, is graded, under runc and under gVisor.

Before: under runc the tamper snapshot could not fork and timed out; under gVisor the sandbox
died whole (its runtime's host threads reached the container's pids limit); with a full disk
the tests could not be uploaded (EDQUOT): each an infrastructure fault, retried and dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import PROCESSES_RECLAIMED, EpisodeRequest, EpisodeRunner
from envfarm.controller.planning import Planner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.settings import current
from envfarm.spec.task import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
answer=$(cat /app/answer.txt 2>/dev/null)
excess=$(cat /app/excess 2>/dev/null || echo missing)
reward=$([ "$answer" = 42 ] && echo 1 || echo 0)
refused=$([ "$excess" = refused ] && echo 1 || echo 0)
echo "{\\"reward\\": $reward, \\"excess_refused\\": $refused}" > /logs/verifier/reward.json
"""
# dash (sh) gives up at the first refused fork, where bash retries for half a minute; the
# sleeps stay behind, holding every pid the container may have.
FORKS = """echo 42 > /app/answer.txt
sh -c 'i=0; while [ $i -lt 3000 ]; do sleep 900 & i=$((i+1)); done' 2>/dev/null
[ $? != 0 ] && echo refused > /app/excess
true
"""
# Written in advance, then the disk filled to the last block and left full.
DISK = """echo 42 > /app/answer.txt
echo refused > /app/excess
dd if=/dev/zero of=/app/fill bs=1M count=400 2>/dev/null || sync
df -m /app >&2
true
"""


def make_task(root: Path, solve: str, environment: str) -> Path:
    files = {
        "task.toml": f'[task]\nname = "test/{root.name}"\n[verifier]\n'
        f'environment_mode = "shared"\n[environment]\nworkdir = "/app"\n{environment}',
        "instruction.md": "Write 42 into /app/answer.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n",
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": solve,
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


async def run_oracle(root: Path, runtime: str | None, realism: str = "off") -> Trajectory:
    task = load_task(root)
    backend = DockerBackend()
    planner = Planner(backend, current().with_flags(runtime=runtime, realism=realism))
    image = await backend.prepare((await planner.plan(task)).sandbox)
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-excess",
            planner=planner,
        )
        return await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )


def assert_graded(trajectory: Trajectory) -> None:
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid, trajectory.reward
    assert trajectory.reward.components["excess_refused"] == 1, trajectory.reward
    assert trajectory.reward.value == 1


@pytest.mark.parametrize("runtime", [None, "runsc"], ids=["runc", "gvisor"])
async def test_forking_until_pids_max_refuses_is_the_agents_outcome(
    tmp_path: Path, runtime: str | None
) -> None:
    root = make_task(tmp_path / f"pids-excess-{runtime or 'runc'}", FORKS, "")
    trajectory = await run_oracle(root, runtime)
    assert_graded(trajectory)
    assert PROCESSES_RECLAIMED in trajectory.reward.flags


@pytest.mark.parametrize(
    ("runtime", "realism"),
    [(None, "off"), ("runsc", "off"), (None, "workstation")],
    ids=["runc", "gvisor", "runc-workstation"],
)
async def test_filling_the_disk_quota_is_the_agents_outcome(
    tmp_path: Path, runtime: str | None, realism: str
) -> None:
    """Under the workstation profile the verifier's logs have no tmpfs: the reserve holds."""
    name = f"disk-excess-{runtime or 'runc'}-{realism}"
    root = make_task(tmp_path / name, DISK, "storage_mb = 64\n")
    assert_graded(await run_oracle(root, runtime, realism))
