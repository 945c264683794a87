"""The page that ends a job's delivery is marked (``Envfarm-Job-Ended``), read in the same
transaction as the job's status, on a real SQLite file and a real PostgreSQL and over real
HTTP: the client stops there instead of polling again, and the stream sends its end event."""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.client import EnvfarmClient
from envfarm.controller.service import Controller
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Trajectory, Turn
from envfarm.store.leases import Lease
from envfarm.store.store import Store
from tests.store_fixtures import leased_result

pytestmark = pytest.mark.asyncio(loop_scope="session")


def result(lease: Lease) -> Trajectory:
    return leased_result(lease, [Turn(index=0, prompt_token_ids=[1, 2], completion_token_ids=[3],
                                      logprobs=[-0.5])])  # fmt: skip


async def job_of(store: Store, tasks: int, done: int) -> str:
    """A job of ``tasks`` one-episode groups, ``done`` of them completed."""
    names, task_hash = [f"end{i}" for i in range(tasks)], f"hash-{uuid.uuid4().hex}"
    request = JobRequest(tasks=names, policy=JobPolicy(base_url="nop"), group_size=1)
    job_id = await store.create_job(request, dict.fromkeys(names, task_hash))
    for lease in await store.lease("w1", done, 60, [task_hash]):
        await store.record("w1", result(lease), final=True)
    return job_id


async def test_only_the_page_read_with_the_jobs_end_and_its_last_group_is_marked(
    store: Store,
) -> None:
    running = await job_of(store, 3, 2)
    page, last, ended = await store.delivered_page(running, after=0, limit=10, consumer="c")
    assert [g.cursor for g in page] == [1, 2]
    assert last == 2
    assert not ended
    assert (await store.delivered_page(running, after=2, limit=10, consumer="c"))[2] is False
    await store.transition(running, "cancel")  # ended: nothing comes after its last group
    assert (await store.delivered_page(running, after=2, limit=10, consumer="c"))[2] is True
    assert (await store.delivered_page(running, after=0, limit=10, consumer="c"))[2] is True
    assert (await store.delivered_page(running, after=0, limit=1, consumer="c"))[2] is False


async def test_the_client_stops_at_the_marked_page_and_the_stream_ends_after_it(
    store: Store,
) -> None:
    job_id = await job_of(store, 3, 3)
    assert (await store.job(job_id)).status == "completed"
    async with ApiServer(create_app(Controller(store, {}), keepalive_s=0.2)) as server:
        groups = f"{server.url}/v1/jobs/{job_id}/groups"
        async with aiohttp.ClientSession() as http:
            for after, marked in ((0, None), (1, None), (2, "true"), (3, "true")):
                params = {"after": after, "limit": 1}
                async with http.get(groups, params=params) as response:
                    assert response.status == 200
                    assert response.headers.get("Envfarm-Job-Ended") == marked, after
                    await response.read()
        async with EnvfarmClient(server.url) as client:
            cursors = [g.cursor async for g in client.groups(job_id, consumer="a", limit=2)]
            assert cursors == [1, 2, 3]
            assert (await client.job(job_id)).consumers["a"] == 3
            lazy = [g.cursor async for g in client.lazy_groups(job_id, consumer="b", limit=1)]
            assert lazy == [1, 2, 3]
            # the stream ends by itself after the page that held the last group
            streamed = [g.cursor async for g in client.stream(job_id, consumer="s")]
            assert streamed == [1, 2, 3]
