"""The client over real HTTP: consuming groups (long-poll and SSE), acks, errors, restarts.

The server side is the API shell over the in-memory double; the same flows against the real
controller are in tests/integration/test_api_*.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.client import ApiConnectionError, ApiError, EnvfarmClient, request_body
from envfarm.client.lazy import LazyGroup
from envfarm.models.jobs import DeliveredGroup, JobRequest
from tests.unit.api_double import MemoryService

TOKEN = "client-token"
JOB = {"tasks": ["alpha", "beta"], "policy": {"base_url": "oracle"}, "group_size": 2}


@pytest_asyncio.fixture(loop_scope="session")
async def served() -> AsyncIterator[tuple[MemoryService, ApiServer, EnvfarmClient]]:
    service = MemoryService()
    app = create_app(service, token=TOKEN, keepalive_s=0.2)
    async with (
        ApiServer(app, graceful_s=1) as server,
        EnvfarmClient(server.url, TOKEN, retry_for_s=30) as client,
    ):
        yield service, server, client


async def test_groups_are_yielded_in_order_acked_only_after_the_body_until_the_job_ends(
    served: tuple[MemoryService, ApiServer, EnvfarmClient],
) -> None:
    service, _, client = served
    job_id = await client.submit(JOB)
    for _ in range(3):
        service.add_group(job_id)
    seen = []
    async for group in client.groups(job_id, wait_s=0.2):
        seen.append(group.cursor)
        # acknowledged in the background: never the group the loop body is still in
        assert service.acked.get((job_id, "default"), 0) <= group.cursor - 1
        if group.cursor == 3:
            service.add_group(job_id)
            service.finish(job_id)
    assert seen == [1, 2, 3, 4]
    assert service.acked[(job_id, "default")] == 4


async def test_a_group_left_by_break_is_not_acked_and_comes_again(
    served: tuple[MemoryService, ApiServer, EnvfarmClient],
) -> None:
    service, _, client = served
    job_id = await client.submit(JOB)
    service.add_group(job_id)
    service.add_group(job_id)
    async for group in client.groups(job_id, consumer="trainer-a", wait_s=0):
        assert group.cursor == 1
        break
    assert (job_id, "trainer-a") not in service.acked
    service.finish(job_id)
    cursors = [g.cursor async for g in client.groups(job_id, consumer="trainer-a", wait_s=0)]
    assert cursors == [1, 2]
    assert [g.cursor async for g in client.groups(job_id, consumer="trainer-a")] == []
    assert [g.cursor async for g in client.groups(job_id, consumer="other", ack=False)] == [1, 2]
    assert (job_id, "other") not in service.acked


@pytest.mark.parametrize("mode", ["long-poll", "sse"])
async def test_consumption_survives_a_server_restart(
    served: tuple[MemoryService, ApiServer, EnvfarmClient], mode: str
) -> None:
    service, server, client = served
    job_id = await client.submit(JOB)
    service.add_group(job_id)
    service.add_group(job_id)
    down, up = asyncio.Event(), asyncio.Event()

    async def consume() -> list[int]:
        seen = []
        groups = client.groups(job_id, wait_s=0.2) if mode == "long-poll" else client.stream(job_id)
        async for group in groups:
            seen.append(group.cursor)
            if group.cursor == 2:
                down.set()
                await up.wait()
        return seen

    consumer = asyncio.create_task(consume())
    await down.wait()
    port = server.port
    server.stop()
    await server.wait()
    up.set()  # the ack of group 2 and the next poll now meet a closed port
    await asyncio.sleep(0.5)
    service.add_group(job_id)
    service.finish(job_id)
    async with ApiServer(create_app(service, token=TOKEN, keepalive_s=0.2), port=port):
        seen = await asyncio.wait_for(consumer, 60)
    assert seen == [1, 2, 3]
    assert service.acked[(job_id, "default")] == 3


async def test_stream_resumes_after_the_acked_cursor_and_ends_with_the_job(
    served: tuple[MemoryService, ApiServer, EnvfarmClient],
) -> None:
    service, _, client = served
    job_id = await client.submit(JOB)
    for _ in range(3):
        service.add_group(job_id)
    await client.ack(job_id, 1)
    seen = []
    async for group in client.stream(job_id):
        seen.append(group.cursor)
        if group.cursor == 3:
            asyncio.get_running_loop().call_later(0.5, service.finish, job_id)
    assert seen == [2, 3]
    assert service.acked[(job_id, "default")] == 3


async def test_errors_are_typed_with_the_problem(
    served: tuple[MemoryService, ApiServer, EnvfarmClient],
) -> None:
    service, server, client = served
    with pytest.raises(ApiError) as raised:
        await client.submit({**JOB, "tasks": ["alpha", 5]})
    assert raised.value.status == 422
    assert raised.value.errors[0]["field"] == "tasks[1]"
    with pytest.raises(ApiError) as raised:
        await client.job("missing")
    assert (raised.value.status, raised.value.type) == (404, "urn:envfarm:problem:job-not-found")
    async with EnvfarmClient(server.url) as anonymous:
        assert await anonymous.healthy()
        with pytest.raises(ApiError) as raised:
            await anonymous.jobs()
    assert raised.value.status == 401
    await client.publish_version("v7")
    assert service.versions[-1] == "v7"
    assert [task.id for task in await client.tasks()] == ["alpha", "beta"]


async def test_an_unreachable_server_fails_after_the_retry_budget() -> None:
    async with ApiServer(create_app(MemoryService())) as server:
        url = server.url
    async with EnvfarmClient(url, retry_for_s=0.5) as client:
        assert not await client.healthy()
        with pytest.raises(ApiConnectionError):
            await client.jobs()


def test_request_body_carries_the_api_keys_the_models_hide() -> None:
    request = JobRequest.model_validate(
        {**JOB, "policy": {"endpoints": [{"url": "http://a/v1", "api_key": "k1"}],
                           "api_key": "k0"}}
    )  # fmt: skip
    assert "k0" not in request.model_dump_json()
    body = request_body(request)
    assert body["policy"]["api_key"] == "k0"
    assert body["policy"]["endpoints"][0]["api_key"] == "k1"
    assert JobRequest.model_validate(body) == request


@pytest.mark.parametrize("mode", ["long-poll", "lazy", "sse"])
async def test_a_consumer_that_stops_mid_page_has_only_what_it_finished_acked(
    served: tuple[MemoryService, ApiServer, EnvfarmClient], mode: str
) -> None:
    """Pages are asked for ahead and the loop lets them arrive while the body runs, but an
    acknowledgement covers only groups the body finished: the rest come again."""
    service, _, client = served
    job_id = await client.submit(JOB)
    for _ in range(9):
        service.add_group(job_id)
    service.finish(job_id)
    consumer = f"mid-page-{mode}"
    kinds: dict[str, Callable[[], AsyncIterator[DeliveredGroup | LazyGroup]]] = {
        "long-poll": lambda: client.groups(job_id, consumer=consumer, limit=2, ack_every=1),
        "lazy": lambda: client.lazy_groups(
            job_id, consumer=consumer, limit=2, ack_every=1, encoding="json"
        ),
        "sse": lambda: client.stream(job_id, consumer=consumer, ack_every=1),
    }
    async for group in kinds[mode]():
        await asyncio.sleep(0.05)  # a trainer's step: acks and the pages ahead go meanwhile
        if group.cursor == 5:  # the first of its page (limit 2: pages 1-2, 3-4, 5-6, ...)
            break
    assert service.acked[(job_id, consumer)] == 4
    assert [g.cursor async for g in kinds[mode]()] == [5, 6, 7, 8, 9]
