"""The clean room carries the agent's whole file system change: a correct solution that edits
``/etc/sudoers.d`` and ``/root/.ssh`` scores in ``clean`` mode as it does in ``shared``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "system-config"


async def run_oracle(root: Path, artifacts: Path) -> Trajectory:
    task = load_task(root)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-cleanroom-system",
            artifacts_dir=artifacts,
        )
        return await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )


@pytest.mark.parametrize("mode", ["clean", "shared"])
async def test_a_solution_outside_the_workdir_scores_in_both_modes(
    tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "system-config"
    shutil.copytree(FIXTURE, root)
    config = root / "task.toml"
    config.write_text(
        config.read_text().replace("[verifier]", f'[verifier]\nenvironment_mode = "{mode}"')
    )
    trajectory = await run_oracle(root, tmp_path / "artifacts")
    stdout = (tmp_path / "artifacts" / "ep" / "verifier" / "test-stdout.txt").read_text()
    assert trajectory.error is None, trajectory.error
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0), stdout
    assert not [f for f in trajectory.reward.flags if f.startswith("tamper:")]
    if mode == "clean":
        received = json.loads((tmp_path / "artifacts" / "ep" / "verifier-input.json").read_text())
        carried = set(received["carried"])
        assert {"/etc/sudoers.d/deploy", "/root/.ssh/authorized_keys"} <= carried
        assert "/home/deploy/.ssh/authorized_keys" in carried
        assert received["deleted"] == ["/etc/sudoers.d/legacy"]
        assert not [p for p in carried if p.startswith(("/solution", "/logs", "/.envfarm"))]


async def test_the_incremental_snapshot_sees_an_edit_whose_mtime_was_set_back(
    tmp_path: Path,
) -> None:
    from tests.docker.grading_tasks import bash, make_task, run_episode

    task = make_task(tmp_path / "backdated", verifier='environment_mode = "shared"')
    edit = (
        "cd /app && echo 'def test_mul_visible(): pass' > tests/test_visible.py "
        "&& touch -d '2001-01-01 00:00' tests/test_visible.py calc.py"
    )
    trajectory = await run_episode(DockerBackend(), task, [bash(edit)], episode_id="ep-backdated")
    assert trajectory.reward.valid, trajectory.reward
    assert "tamper:tests_modified" in trajectory.reward.flags
    details = trajectory.reward.flag_details["tamper:tests_modified"]
    assert details == ["tests/test_visible.py"]
