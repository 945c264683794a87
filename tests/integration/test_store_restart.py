"""PostgreSQL restarting under ``envfarm serve``: the group stream ends cleanly, not with a
traceback. A finding of bench/chaos.py: a store error inside the event stream, after the
response had begun, escaped as ``RuntimeError`` (a 500 logged with a traceback, the connection
cut mid-chunk). Now the stream says ``: store unavailable`` and ends; the client reconnects
from its last cursor.

The cluster is the test's own (``envfarm.testing.pg_cluster.PrivateCluster``), stopped in
immediate mode while the stream is open, then started again.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from envfarm.client import EnvfarmClient
from envfarm.controller.groups import finalize_group
from envfarm.errors import StoreError
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Provenance, Reward, Trajectory
from envfarm.store.store import Store
from envfarm.testing.pg_cluster import PrivateCluster, free_port
from tests.integration.serve_process import ServeProcess

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="session")]


async def one_group_done(url: str) -> str:
    """A job of two groups of one, the first completed: its stream stays open."""
    store = await Store.open(url, finalize=finalize_group)
    try:
        request = JobRequest(tasks=["r/a", "r/b"], policy=JobPolicy(base_url="nop"))
        job_id = await store.create_job(request, {"r/a": "h-a", "r/b": "h-b"})
        [lease] = await store.lease("fill", 1, 3600, ["h-a"])
        await store.record("fill", Trajectory(
            trajectory_id=f"{lease.episode_id}-a0", episode_id=lease.episode_id,
            job_id=job_id, group_id=lease.group_id, task_id=lease.task_id,
            reward=Reward(value=1.0, valid=True),
            provenance=Provenance(task_hash=lease.task_hash, envfarm_version="t"),
        ), final=True)  # fmt: skip
        return job_id
    finally:
        await store.close()


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    root = Path(tempfile.mkdtemp(prefix="envfarm-pg-"))
    root.chmod(0o755)  # the cluster's owner must reach its directory
    cluster = PrivateCluster(root / "pg").start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_a_postgresql_restart_ends_the_group_stream_cleanly(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    job_id = await one_group_done(cluster.url)
    (tmp_path / "tasks").mkdir()
    args = ("--no-worker", "--db", cluster.url, "--tasks", str(tmp_path / "tasks"),
            "--data-dir", str(tmp_path), "--port", str(free_port()))  # fmt: skip
    server = ServeProcess(tmp_path, *args).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{server.url}/v1/jobs/{job_id}/groups",
                params={"after": "0"},
                headers={"Accept": "text/event-stream"},
                timeout=aiohttp.ClientTimeout(total=240),
            ) as response,
        ):
            assert response.status == 200
            received = b""
            while b"event: group" not in received:
                received += await response.content.readany()
            await asyncio.to_thread(cluster.crash)
            received += await response.content.read()  # to the end: no cut mid-chunk
        await asyncio.to_thread(cluster.resume)
        assert received.rstrip().endswith(b": store unavailable"), received[-300:]
        assert b"event: end" not in received
        assert "Traceback" not in server.output()
        async with EnvfarmClient(server.url, retry_for_s=60) as client:  # the store is back
            page = await client.page(job_id, after=0)
            assert [group.cursor for group in page.groups] == [1]
    finally:
        server.kill()


async def test_a_store_opened_while_postgresql_is_down_waits_for_it(
    cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started during a restart (bench/chaos.py killed one then) waits, then works."""
    cluster.crash()
    opening = asyncio.create_task(Store.open(cluster.url, finalize=finalize_group))
    while not any("not reachable" in r.getMessage() for r in caplog.records):
        assert not opening.done(), "the store gave up instead of waiting"
        await asyncio.sleep(0.05)
    await asyncio.to_thread(cluster.resume)
    store = await opening
    try:
        request = JobRequest(tasks=["r/a"], policy=JobPolicy(base_url="nop"))
        job_id = await store.create_job(request, {"r/a": "h-a"})
        assert job_id.startswith("job-")
    finally:
        await store.close()


async def test_a_refusal_other_than_not_up_yet_is_not_waited_for(
    cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        await Store.open(cluster.url.rsplit("/", 1)[0] + "/no_such_database")
    assert not any("not reachable" in r.getMessage() for r in caplog.records)
