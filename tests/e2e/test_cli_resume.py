"""``envfarm run --resume``: a run killed with SIGKILL is finished without redoing any episode."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import docker

from envfarm.sandbox.docker.labels import LABEL_TASK

REPO = Path(__file__).resolve().parents[2]
TASK_ID = "test/resumable"


def slowish_task(root: Path) -> Path:
    task = root / "resumable"
    shutil.copytree(REPO / "tasks" / "fix-lru-cache", task)
    config = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        config.replace('name = "envfarm/fix-lru-cache"', f'name = "{TASK_ID}"')
    )
    solve = task / "solution" / "solve.sh"
    solve.write_text("sleep 3\n" + solve.read_text())
    return task


def finished(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("select count(*) from trajectories").fetchone()[0])
    except sqlite3.OperationalError:  # not migrated yet
        return 0


def envfarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_killed_run_resumes_and_every_episode_ends_exactly_once(tmp_path: Path) -> None:
    task, out = slowish_task(tmp_path), tmp_path / "out"
    assert TASK_ID in (task / "task.toml").read_text()
    args = ["run", str(task), "--group-size", "4", "--concurrency", "2", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "envfarm", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while finished(out / "envfarm.db") < 1:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no episode finished"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = finished(out / "envfarm.db")
    assert 1 <= before < 4

    resumed = envfarm("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]

    lines = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    assert len({t["episode_id"] for t in lines}) == 4
    assert all(t["reward"]["value"] == 1.0 and t["task_id"] == TASK_ID for t in lines)
    with sqlite3.connect(out / "envfarm.db") as conn:
        attempts = conn.execute("select episode_id, final, error_type from attempts").fetchall()
    finals = [episode for episode, final, _ in attempts if final]
    assert sorted(finals) == sorted(t["episode_id"] for t in lines)  # each ended once
    lost = [episode for episode, final, error in attempts if error == "WorkerLost"]
    assert all(not final for _, final, error in attempts if error == "WorkerLost")
    assert len(lost) + before <= 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4
    assert summary["completed"] == 4
    client = docker.from_env()
    left = client.containers.list(all=True, filters={"label": f"{LABEL_TASK}={TASK_ID}"})
    assert left == []


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = envfarm("run", "--resume", str(tmp_path))
    assert result.returncode == 2
    assert "not the output directory of an envfarm run" in result.stderr
