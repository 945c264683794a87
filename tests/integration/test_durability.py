"""Durability and scale-out of ``envfarm serve`` as real processes on the real engine.

A server killed with SIGKILL several times during a job still delivers every group exactly
once to a consumer that acknowledges; two controllers sharing PostgreSQL split a job without
running any episode twice.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from envfarm.client import EnvfarmClient
from envfarm.models.jobs import DeliveredGroup
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.asyncio(loop_scope="session")
REPO = Path(__file__).resolve().parents[2]


def task_dir(root: Path, names: list[str], sleep_s: float) -> Path:
    """Copies of a quick task whose oracle takes ``sleep_s`` longer, one per name."""
    tasks = root / "tasks"
    for name in names:
        task = tasks / name
        shutil.copytree(REPO / "tasks" / "word-count-cli", task)
        config = (task / "task.toml").read_text()
        (task / "task.toml").write_text(
            config.replace('name = "envfarm/word-count-cli"', f'name = "durable/{name}"')
        )
        solve = task / "solution" / "solve.sh"
        solve.write_text(f"sleep {sleep_s}\n{solve.read_text()}")
    return tasks


def start_worker(workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    with (workdir / "worker.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "envfarm", "worker", *args],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def consume(client: EnvfarmClient, job_id: str) -> list[DeliveredGroup]:
    return [group async for group in client.groups(job_id, wait_s=5.0)]


def job_body(tasks: list[str], group_size: int) -> dict[str, object]:
    return {
        "tasks": tasks,
        "policy": {"base_url": "oracle"},
        "group_size": group_size,
        "max_retries": 8,
    }


async def test_sigkill_during_a_job_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    names = ["a", "b", "c"]
    tasks = task_dir(tmp_path, names, sleep_s=2)
    args = ["--tasks", str(tasks), "--data-dir", str(tmp_path / "data"), "--concurrency", "3"]
    server = ServeProcess(tmp_path, *args).start()
    try:
        async with EnvfarmClient(server.url, retry_for_s=600) as client:
            job_id = await client.submit(job_body([f"durable/{n}" for n in names], 3))
            consumer = asyncio.create_task(consume(client, job_id))
            for _ in range(3):
                await asyncio.sleep(6)
                server.stop(signal.SIGKILL)
                port = server.url.rsplit(":", 1)[1]
                server.args = [*args, "--port", port]
                server = ServeProcess(tmp_path, *server.args).start()
            groups = await asyncio.wait_for(consumer, 900)
            view = await client.job(job_id)
    finally:
        server.kill()
    cursors = [group.cursor for group in groups]
    assert cursors == list(range(1, len(names) + 1)), server.output()
    episodes = [t["episode_id"] for group in groups for t in group.trajectories]
    assert len(episodes) == len(set(episodes)) == 9
    assert all(t["reward"]["valid"] for group in groups for t in group.trajectories)
    assert view.status == "completed"
    assert view.counts.completed == 9
    assert view.counts.attempts >= 9


async def test_two_controllers_on_postgresql_split_a_job_without_running_any_episode_twice(
    tmp_path: Path, pg_url: str
) -> None:
    names = ["p", "q", "r", "s"]
    tasks = task_dir(tmp_path, names, sleep_s=1)
    common = ["--tasks", str(tasks), "--db", pg_url, "--concurrency", "2"]
    server = ServeProcess(tmp_path, *common, "--data-dir", str(tmp_path / "one")).start()
    worker = start_worker(tmp_path, *common, "--data-dir", str(tmp_path / "two"))
    try:
        async with EnvfarmClient(server.url) as client:
            job_id = await client.submit(job_body([f"durable/{n}" for n in names], 3))
            groups = await asyncio.wait_for(consume(client, job_id), 900)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(120)
        server.stop()
    assert len(groups) == 4
    libpq = "postgresql://" + pg_url.split("://", 1)[1]
    with psycopg.connect(libpq) as conn:
        rows = conn.execute(
            "select episode_id, worker, final, error_type from attempts where job_id = %s",
            (job_id,),
        ).fetchall()
    assert len(rows) == 12
    assert len({row[0] for row in rows}) == 12
    assert all(final and error is None for _, _, final, error in rows)
    workers = {row[1] for row in rows}
    assert len(workers) == 2, (workers, (tmp_path / "worker.log").read_text()[-3000:])
