"""What every trainer adapter shares: training rows of real trajectories, and the group feed
(jobs, the trainer's version, staleness) over the real client and HTTP shell."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.client import EnvfarmClient
from envfarm.integrations import skyrl, slime, trl, verl
from envfarm.integrations.episodes import IntegrationError, episode_rows, version_number
from envfarm.integrations.feed import FedGroup, GroupFeed, run_job
from envfarm.models.token_layout import full_prompts
from tests.trainer_groups import real_group
from tests.unit.api_double import MemoryService
from tests.waiting import until

TOKEN = "feed-token"
JOB = {"tasks": ["alpha"], "policy": {"base_url": "oracle"}, "group_size": 4}


@pytest_asyncio.fixture(loop_scope="session")
async def served() -> AsyncIterator[tuple[MemoryService, EnvfarmClient]]:
    service = MemoryService()
    app = create_app(service, token=TOKEN, keepalive_s=0.2)
    async with (
        ApiServer(app, graceful_s=1) as server,
        EnvfarmClient(server.url, TOKEN, retry_for_s=30) as client,
    ):
        yield service, client


async def test_rows_are_the_sampled_tokens_exactly_split_at_the_first_prompt() -> None:
    fed = FedGroup.of(await real_group(1))
    summarized, short = fed.trajectories[0], fed.trajectories[1]
    (row,) = episode_rows(short)
    prompts = list(full_prompts(short.turns))
    last = short.turns[-1]
    assert row.prompt_ids == prompts[0]
    assert row.tokens == (prompts[-1] or []) + (last.completion_token_ids or [])
    sampled = [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m]
    assert sampled == [t for turn in short.turns for t in turn.completion_token_ids or []]
    assert [p for p, m in zip(row.response_logprobs, row.response_mask, strict=True) if m] == [
        p for turn in short.turns for p in turn.logprobs or []
    ]
    assert row.routed_experts is not None
    assert row.routed_experts.shape[0] == len(row.tokens) - 1
    assert (row.reward, row.advantage, row.last) == (0.0, short.advantage, True)

    rows = episode_rows(summarized)
    assert len(summarized.segments) == 1
    assert [r.segment for r in rows] == [0, 1]
    assert [r.last for r in rows] == [False, True]
    assert all(r.count == 2 and r.reward == 1.0 for r in rows)
    invalid = episode_rows(fed.trajectories[3])
    assert len(invalid) == 1
    assert (invalid[0].valid, invalid[0].reward) == (False, None)


@pytest.mark.parametrize(
    ("version", "number"), [("7", 7), ("7.0", 7), ("7.5", None), ("v7", None), (None, None)]
)
def test_versions_read_as_integer_steps(version: str | None, number: int | None) -> None:
    assert version_number(version) == number


async def test_a_feed_submits_its_request_with_the_bound_drops_stale_groups_and_resubmits(
    served: tuple[MemoryService, EnvfarmClient],
) -> None:
    service, client = served
    feed = GroupFeed(client, JOB, max_staleness=2, consumer="feed", wait_s=0.2)
    await feed.publish(5)
    seen: list[tuple[str | None, int]] = []
    stream = aiter(feed)
    first_job: str | None = None

    async def deliver() -> None:
        await until(lambda: feed.job_id is not None)
        nonlocal first_job
        first_job = job_id = feed.job_id or ""
        for cursor, dispatched in ((1, "4"), (2, "1"), (3, "5")):
            group = await real_group(cursor, dispatch_version=dispatched)
            service.delivered[job_id].append(group)
        service.changed.set()
        service.finish(job_id)

    delivery = asyncio.create_task(deliver())
    for _ in range(2):
        group = await anext(stream)
        seen.append((group.meta.dispatch_version, group.meta.cursor))
    await delivery
    assert seen == [("4", 1), ("5", 3)]
    assert (feed.delivered, feed.dropped_stale) == (2, 1)
    assert first_job is not None
    assert service.requests[first_job].max_staleness == 2
    assert service.versions[-1] == "5"
    # the job ended: the same request is submitted again and read from its start
    submitted = len(service.requests)
    pending: asyncio.Future[FedGroup] = asyncio.ensure_future(anext(stream))
    await until(lambda: len(service.requests) > submitted)
    pending.cancel()
    assert feed.job_id != first_job
    assert service.requests[feed.job_id or ""].tasks == ["alpha"]


async def test_run_job_returns_every_group_of_the_job(
    served: tuple[MemoryService, EnvfarmClient],
) -> None:
    service, client = served

    submitted = len(service.requests)

    async def deliver() -> None:
        await until(lambda: len(service.requests) > submitted)
        job_id = list(service.requests)[-1]
        service.delivered[job_id].append(await real_group(1))
        service.finish(job_id)

    delivery = asyncio.create_task(deliver())
    groups = await run_job(client, {**JOB, "max_staleness": 0}, max_staleness=3, consumer="run")
    await delivery
    assert [len(g.trajectories) for g in groups] == [4]
    assert list(service.requests.values())[-1].max_staleness == 0


async def test_the_adapters_import_without_their_trainers_and_say_what_to_install() -> None:
    group = FedGroup.of(await real_group(1))
    with pytest.raises(IntegrationError, match=r"envfarm\[verl\]"):
        verl.EnvfarmAgentLoop(url="http://envfarm", job={})
    with pytest.raises(IntegrationError, match=r"envfarm\[skyrl\]"):
        skyrl.EnvfarmGenerator("http://envfarm", {})
    with pytest.raises(IntegrationError, match=r"envfarm\[trl\]"):
        trl.rollout_samples(group)
    with pytest.raises(IntegrationError, match="THUDM/slime"):
        slime.group_samples(group, group_index=0)
