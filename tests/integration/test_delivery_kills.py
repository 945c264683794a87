"""Exactly-once after acknowledgement while the server is killed with SIGKILL mid-stream.

A store holds completed groups; ``envfarm serve --no-worker`` serves them on a fixed loopback
port. A consumer reads them through the client's packed stream (background acks every few
groups) while the server is SIGKILLed three times and restarted on the same store: the
consumer sees every group once, in order, and after the client closed, the store holds its
acknowledgement of every group it finished, so a new read from the acknowledged cursor finds
only the one its loop broke out of.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from envfarm.client import EnvfarmClient
from envfarm.controller.groups import finalize_group
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Provenance, Reward, Trajectory, Turn
from envfarm.store.store import Store
from tests.integration.serve_process import ServeProcess, free_port
from tests.store_fixtures import db_url, pg_url  # noqa: F401

GROUPS, KILLS = 40, 3
pytestmark = pytest.mark.timeout(300)


async def fill(url: str) -> str:
    store = await Store.open(url, finalize=finalize_group)
    try:
        tasks = [f"kills/t{i}" for i in range(GROUPS)]
        job = JobRequest(tasks=tasks, policy=JobPolicy(base_url="nop"), group_size=2)
        job_id = await store.create_job(job, {task: f"h-{task}" for task in tasks})
        while leases := await store.lease("fill", 64, 3600, [f"h-{t}" for t in tasks]):
            for lease in leases:
                turn = Turn(index=0, prompt_token_ids=list(range(300)),
                            completion_token_ids=[7] * 50, logprobs=[-0.5] * 50)  # fmt: skip
                await store.record("fill", Trajectory(
                    trajectory_id=f"{lease.episode_id}-a0", episode_id=lease.episode_id,
                    job_id=lease.job_id, group_id=lease.group_id, task_id=lease.task_id,
                    turns=[turn], reward=Reward(value=1.0, valid=True),
                    provenance=Provenance(task_hash=lease.task_hash, envfarm_version="t"),
                ), final=True)  # fmt: skip
        return job_id
    finally:
        await store.close()


async def test_three_sigkills_mid_stream_deliver_every_group_once(
    db_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    job_id = await fill(db_url)
    (tmp_path / "tasks").mkdir()
    port = free_port()
    args = ("--no-worker", "--db", db_url, "--tasks", str(tmp_path / "tasks"),
            "--data-dir", str(tmp_path), "--port", str(port))  # fmt: skip
    server = ServeProcess(tmp_path, *args).start()
    seen: list[int] = []
    kills = 0
    try:
        async with EnvfarmClient(server.url, retry_for_s=120) as client:
            async for group in client.lazy_stream(job_id, compression="gzip", ack_every=3,
                                                  ack_interval_s=0.05):  # fmt: skip
                seen.append(group.cursor)
                assert group.trajectories[0].token_arrays("completion_token_ids") == [[7] * 50]
                if len(seen) % 10 == 5 and kills < KILLS:
                    await asyncio.sleep(0.1)  # let a background ack land, or not
                    server.stop(signal.SIGKILL)
                    kills += 1
                    server.start()
                if group.cursor == GROUPS:
                    break
        assert seen == list(range(1, GROUPS + 1))
        assert kills == KILLS
        async with EnvfarmClient(server.url) as client:
            # the loop broke inside the last group: it was never finished, so never acked
            assert (await client.job(job_id)).consumers["default"] == GROUPS - 1
            assert [g.cursor for g in (await client.page(job_id)).groups] == [GROUPS]
    finally:
        server.kill()
