"""Regrading a run directory written by hand: artifacts in, rewards, advantages and summary out."""

from __future__ import annotations

import json
from pathlib import Path

from envfarm.controller.regrade import regrade_run
from envfarm.grading.artifacts import Bundle, EpisodeRecord, write_bundle
from envfarm.grading.tamper.inspection import Inspection
from envfarm.grading.verifier.verdict import VerifierOutput
from envfarm.models.trajectory import Provenance, Reward, Trajectory
from envfarm.spec.task import load_task


def make_task(root: Path, verifier: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(f'[task]\nname = "t/regrade"\n[verifier]\n{verifier}\n')
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("pytest --junitxml=/logs/verifier/junit.xml\n")
    return root


JUNIT = b'<testsuite tests="1"><testcase classname="test_x" name="test_a"/></testsuite>'


def write_run(out: Path, task_root: Path) -> list[Trajectory]:
    task = load_task(task_root)
    trajectories = []
    for index, (reward_txt, flags) in enumerate(
        [(b"1", []), (b"0", []), (b"1", [("tamper:conftest_added", "/app/conftest.py")])]
    ):
        episode = f"ep-{index}"
        trajectory = Trajectory(
            trajectory_id=f"{episode}-a0",
            episode_id=episode,
            job_id="job",
            group_id="grp",
            task_id=task.id,
            reward=Reward(value=float(reward_txt), valid=True, reason="reward.txt"),
            artifacts=f"artifacts/{episode}",
            provenance=Provenance(task_hash=task.content_hash, envfarm_version="0"),
        )
        files = {"reward.txt": reward_txt, "junit.xml": JUNIT}
        write_bundle(
            out / "artifacts" / episode,
            Bundle(
                record=EpisodeRecord(
                    trajectory_id=trajectory.trajectory_id,
                    episode_id=episode,
                    attempt=0,
                    task_id=task.id,
                    task_root=str(task.root),
                    task_hash=task.content_hash,
                ),
                verifier=VerifierOutput(0, False, 60, files=files),
                inspection=Inspection(flags=flags),
            ),
        )
        trajectories.append(trajectory)
    never_graded = Trajectory(
        trajectory_id="ep-3-a2",
        episode_id="ep-3",
        job_id="job",
        group_id="grp",
        task_id=task.id,
        provenance=Provenance(task_hash=task.content_hash, envfarm_version="0"),
    )
    trajectories.append(never_graded)
    lines = "".join(t.to_json() + "\n" for t in trajectories)
    (out / "trajectories.jsonl").write_text(lines)
    (out / "summary.json").write_text(json.dumps({"job_id": "job", "policy": "p", "model": "m"}))
    return trajectories


def test_regrade_recomputes_rewards_advantages_and_the_summary(tmp_path: Path) -> None:
    task_root = make_task(tmp_path / "task")
    write_run(tmp_path / "run", task_root)
    result = regrade_run(tmp_path / "run")
    assert [c.after.value for c in result.changes] == [1.0, 0.0, 1.0]
    assert list(result.skipped) == ["ep-3"]
    assert "no artifacts were kept" in result.skipped["ep-3"]
    third = json.loads(result.lines[2])
    assert third["reward"]["flags"] == ["tamper:conftest_added"]
    assert third["reward"]["tests"][0]["name"] == "test_x::test_a"
    advantages = [json.loads(line)["advantage"] for line in result.lines]
    assert advantages[1] < 0 < advantages[0] == advantages[2]
    assert advantages[3] is None
    assert result.summary is not None
    assert (result.summary.episodes, result.summary.completed) == (4, 3)
    assert result.summary.job_id == "job"

    (task_root / "task.toml").write_text(
        '[task]\nname = "t/regrade"\n[verifier]\nzero_on_flags = ["tamper:*"]\n'
        'fail_to_pass = ["test_x.py::test_a"]\n'
    )
    strict = regrade_run(tmp_path / "run")
    assert [c.after.value for c in strict.changes] == [1.0, 1.0, 0.0]
    assert strict.changes[2].after.components["reward_before_flags"] == 1.0
    assert [c.changed for c in strict.changes] == [False, True, True]


def test_regrade_with_a_task_that_cannot_be_loaded_keeps_the_rewards(tmp_path: Path) -> None:
    task_root = make_task(tmp_path / "task")
    write_run(tmp_path / "run", task_root)
    (task_root / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n")
    result = regrade_run(tmp_path / "run")
    assert result.changes == []
    assert set(result.skipped) == {"ep-0", "ep-1", "ep-2", "ep-3"}
    assert "t/regrade" in result.problems
    other = make_task(tmp_path / "elsewhere")
    moved = regrade_run(tmp_path / "run", [other])
    assert [c.after.value for c in moved.changes] == [1.0, 0.0, 1.0]
