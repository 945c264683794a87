"""The event stream reads the next page while it sends a page, and leaves no read behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

import pytest

from envfarm.api.stream import group_events
from envfarm.models.jobs import JobPolicy, JobRequest, RawGroupPage
from tests.unit.api_double import MemoryService

pytestmark = pytest.mark.asyncio(loop_scope="session")


class CountingService(MemoryService):
    def __init__(self) -> None:
        super().__init__()
        self.polls: list[int | None] = []
        self.running = 0

    async def groups(self, job_id: str, *, after: int | None, limit: int, wait_s: float,
                     consumer: str = "default", packed: bool = False) -> RawGroupPage:  # fmt: skip
        self.polls.append(after)
        self.running += 1
        try:
            return await super().groups(job_id, after=after, limit=limit, wait_s=wait_s,
                                        consumer=consumer, packed=packed)  # fmt: skip
        finally:
            self.running -= 1


async def test_the_next_page_is_asked_for_before_a_page_is_sent_and_dropped_when_the_client_goes(
) -> None:  # fmt: skip
    service = CountingService()
    job_id = await service.submit(
        JobRequest(tasks=["alpha"], policy=JobPolicy(base_url="nop"), group_size=2)
    )
    for _ in range(3):
        service.add_group(job_id)
    events = cast(
        AsyncGenerator[bytes, None],
        group_events(service, job_id, after=None, consumer="c", limit=2, keepalive_s=30),
    )
    assert (await anext(events)).startswith(b"retry:")
    assert (await anext(events)).startswith(b"id: 1\n")
    await asyncio.sleep(0)
    assert service.polls == [None, 2]  # the page after group 2, read while group 1 is sent
    assert (await anext(events)).startswith(b"id: 2\n")
    assert (await anext(events)).startswith(b"id: 3\n")
    await asyncio.sleep(0)
    assert service.polls == [None, 2, 3]
    assert service.running == 1  # the poll after group 3 waits for a group that never comes
    await events.aclose()  # the client went away
    assert service.running == 0
