"""The state before the agent is taken once per image and task: a later episode reuses it and
grades, flags and carries exactly as the first one did."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task
from tests.docker.grading_tasks import FIXED_CALC, bash, make_task, run_episode

pytestmark = pytest.mark.asyncio(loop_scope="session")

STEPS = [
    bash(f"cat > /app/calc.py <<'PY'\n{FIXED_CALC}PY"),
    bash("echo 'def test_mul_visible(): pass' > /app/tests/test_visible.py"),
    bash("echo note > /etc/agent-note && rm -f /etc/issue.net && mkdir -p /srv/new/dir"),
    bash("echo 'collect_ignore = []' > /conftest.py"),
]


def received(artifacts: Path, episode: str) -> dict[str, object]:
    data = json.loads((artifacts / episode / "verifier-input.json").read_text())
    return {key: data[key] for key in ("carried", "deleted", "restored", "withheld")}


def outcome(trajectory: Trajectory) -> tuple[object, ...]:
    reward = trajectory.reward
    return (reward.valid, reward.value, sorted(reward.flags), reward.flag_details)


async def test_a_later_episode_reuses_the_state_before_the_agent(tmp_path: Path) -> None:
    task = make_task(tmp_path / "pristine")
    (task.root / "instruction.md").write_text(f"Fix calc.add ({uuid.uuid4().hex}).\n")
    task = load_task(task.root)  # a content hash no earlier run had: nothing cached yet
    backend = DockerBackend()
    artifacts = tmp_path / "artifacts"
    first = await run_episode(backend, task, STEPS, episode_id="ep-1", artifacts_dir=artifacts)
    second = await run_episode(backend, task, STEPS, episode_id="ep-2", artifacts_dir=artifacts)
    assert first.error is None, first.error
    assert second.error is None, second.error
    assert "listing" in first.timings.phases
    assert "pristine" not in first.timings.phases
    assert "pristine" in second.timings.phases
    assert "listing" not in second.timings.phases
    assert "snapshot_before" not in second.timings.phases
    assert outcome(second) == outcome(first)
    assert (second.reward.valid, second.reward.value) == (True, 1.0)
    assert {"tamper:tests_modified", "tamper:carry_withheld"} <= set(second.reward.flags)
    assert received(artifacts, "ep-2") == received(artifacts, "ep-1")
    carried = received(artifacts, "ep-2")["carried"]
    assert isinstance(carried, list)
    assert {"/app/calc.py", "/etc/agent-note", "/srv/new/dir"} <= set(carried)
    assert received(artifacts, "ep-2")["deleted"] == ["/etc/issue.net"]
    diff = (artifacts / "ep-2" / "workspace" / "diff.patch").read_text()
    assert "+    return a + b" in diff


async def test_an_episode_without_the_solution_reuses_the_oracles_state(tmp_path: Path) -> None:
    from tests.docker.test_cleanroom_system import run_oracle

    task = make_task(tmp_path / "nop-reuse")
    dockerfile = task.root / "environment" / "Dockerfile"
    # the image has a /solution of its own: a nop's container holds that, not the oracle's
    dockerfile.write_text(
        dockerfile.read_text() + "RUN mkdir -p /solution && echo image > /solution/notes.txt\n"
    )
    (task.root / "instruction.md").write_text(f"Fix calc.add ({uuid.uuid4().hex}).\n")
    task = load_task(task.root)
    backend = DockerBackend()
    artifacts = tmp_path / "artifacts"  # kept by all three: the same key but the solution
    oracle = await run_oracle(task.root, artifacts)
    assert (oracle.reward.valid, oracle.reward.value) == (True, 1.0)
    assert "listing" in oracle.timings.phases

    edit = bash("echo agent > /solution/notes.txt")
    planted = await run_episode(
        backend, task, [edit], episode_id="ep-planted", artifacts_dir=artifacts
    )
    assert "pristine" in planted.timings.phases
    assert "listing" not in planted.timings.phases
    assert "snapshot_before" not in planted.timings.phases
    assert planted.reward.flag_details.get("tamper:hidden_path_planted") == ["/solution/notes.txt"]

    nop = await run_episode(backend, task, [], episode_id="ep-nop", artifacts_dir=artifacts)
    assert "listing" not in nop.timings.phases
    assert (nop.reward.valid, nop.reward.value) == (True, 0.0), nop.reward
    assert not [f for f in nop.reward.flags if f.startswith("tamper:")], nop.reward.flags
