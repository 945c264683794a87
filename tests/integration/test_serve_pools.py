"""``envfarm serve --warm-pool``: episodes take started sandboxes; nothing is left at shutdown."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import docker
import pytest

from envfarm.client import EnvfarmClient
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_TASK
from tests.integration.serve_process import ServeProcess
from tests.integration.test_durability import consume, job_body, task_dir

pytestmark = pytest.mark.asyncio(loop_scope="session")
TASK_ID = "durable/pooled"


def sandboxes(*, started: bool = False) -> list[str]:
    """The task's containers; ``started``: running ones only (each pooled sandbox also holds
    its clean room's container, created but not started)."""
    labels = [f"{LABEL_TASK}={TASK_ID}", f"{LABEL_KIND}=sandbox"]
    filters: dict[str, str | list[str] | bool] = {"label": labels}
    if started:
        filters["status"] = "running"
    found = docker.from_env().containers.list(all=True, filters=filters)
    return [c.id for c in found if c.id is not None]


def wait_for_sandboxes(count: int) -> list[str]:
    """Wait, with a budget, until ``count`` started sandboxes exist: the pool refills, and
    finished episodes' containers (and their verifiers') are torn down after their results."""
    deadline = time.monotonic() + 120
    while len(found := sandboxes(started=True)) != count and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


async def test_a_warm_pool_serves_episodes_and_is_emptied_on_shutdown(tmp_path: Path) -> None:
    tasks = task_dir(tmp_path, ["pooled"], sleep_s=0)
    args = ["--tasks", str(tasks), "--data-dir", str(tmp_path / "data"), "--warm-pool", "2"]
    server = ServeProcess(tmp_path, *args).start()
    try:
        async with EnvfarmClient(server.url) as client:
            job_id = await client.submit(job_body([TASK_ID], 3))
            [group] = await asyncio.wait_for(consume(client, job_id), 600)
        waiting = await asyncio.to_thread(wait_for_sandboxes, 2)  # the pool refills
    finally:
        assert server.stop() == 0, server.output()
    assert all(t["reward"]["value"] == 1.0 for t in group.trajectories)
    assert len(waiting) == 2, server.output()
    assert sandboxes() == []
