"""Results recorded in one transaction per batch, and the packed copies the store keeps, on a
real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import delete

from envfarm.api.encodings import Encoding, encode_page
from envfarm.controller.record_batch import RecordBatcher
from envfarm.models.jobs import JobPolicy, JobRequest, RawGroup, RawGroupPage
from envfarm.models.packing import loads, packed_text
from envfarm.models.trajectory import Trajectory, Turn
from envfarm.store.leases import Lease
from envfarm.store.schema import packed_trajectories
from envfarm.store.store import Store
from tests.store_fixtures import leased_result

pytestmark = pytest.mark.asyncio(loop_scope="session")


def result(lease: Lease, *, attempt: int | None = None) -> Trajectory:
    turn = Turn(index=0, prompt_token_ids=[1, 70000, 2**31 - 1], completion_token_ids=[5, -3],
                logprobs=[-0.5, -0.25])  # fmt: skip
    return leased_result(lease, [turn], attempt=attempt)


async def new_job(store: Store, tasks: int, group_size: int) -> str:
    names = [f"t{i}" for i in range(tasks)]
    request = JobRequest(tasks=names, policy=JobPolicy(base_url="nop"), group_size=group_size)
    return await store.create_job(request, dict.fromkeys(names, "hash-t"))


async def test_results_recorded_together_each_answered_and_a_stale_one_alone(
    store: Store,
) -> None:
    job_id = await new_job(store, 4, 4)
    leases = await store.lease("w1", 16, 60, ["hash-t"])
    assert len(leases) == 16
    batcher = RecordBatcher(store, "w1")
    stale = leases[0]
    # a result for an attempt the worker no longer holds is "lost"; the others are recorded
    answers = await asyncio.gather(
        batcher.record(result(stale, attempt=stale.attempt + 1), True),
        *(batcher.record(result(lease), True) for lease in leases[1:]),
    )
    assert answers[0].status == "lost"
    assert [a.status for a in answers[1:]] == ["final"] * 15
    assert sum(a.group_completed for a in answers) == 3  # the stale one's group is open
    assert batcher.results == 16
    assert batcher.batches < 16
    assert (await batcher.record(result(stale), True)).group_completed
    view = await store.job(job_id)
    assert view.status == "completed"
    assert view.last_cursor == 4


async def test_delivered_groups_carry_packed_copies_equal_to_packing_on_the_fly(
    store: Store,
) -> None:
    job_id = await new_job(store, 2, 2)
    for lease in await store.lease("w1", 4, 60, ["hash-t"]):
        await store.record("w1", result(lease), True)
    groups, _ = await store.delivered(job_id, after=0, limit=10, consumer="c")
    assert len(groups) == 2
    for group in groups:
        assert group.packed == [packed_text(text) for text in group.trajectories]
    stored = encode_page(RawGroupPage(groups), Encoding("application/json", packed=True))
    fresh = [RawGroup(g.meta, g.trajectories) for g in groups]  # as rows from before 0004
    assert stored == encode_page(RawGroupPage(fresh), Encoding("application/json", packed=True))
    one, _ = await store.delivered(job_id, after=0, limit=10, consumer="c", max_bytes=1)
    assert [g.cursor for g in one] == [1]  # a page past its byte budget still holds a group


async def test_a_delivery_reads_only_the_texts_its_answer_sends(store: Store) -> None:
    job_id = await new_job(store, 2, 2)
    for lease in await store.lease("w1", 4, 60, ["hash-t"]):
        await store.record("w1", result(lease), True)
    both, _ = await store.delivered(job_id, after=0, limit=10, consumer="c")
    json_only, _ = await store.delivered(job_id, after=0, limit=10, consumer="c", forms="json")
    packed, _ = await store.delivered(job_id, after=0, limit=10, consumer="c", forms="packed")
    for full, plain, compact in zip(both, json_only, packed, strict=True):
        assert plain.trajectories == full.trajectories
        assert plain.packed == [None] * len(full.trajectories)
        assert compact.packed == full.packed
        assert compact.trajectories == [""] * len(full.trajectories)
    as_packed = Encoding("application/json", packed=True)
    assert encode_page(RawGroupPage(packed), as_packed) == encode_page(
        RawGroupPage(both), as_packed
    )
    arrow = Encoding("application/vnd.apache.arrow.stream")
    assert encode_page(RawGroupPage(packed), arrow) == encode_page(RawGroupPage(both), arrow)

    ids = [loads(text)["trajectory_id"] for text in both[0].trajectories]
    await store.transaction(  # a group completed before the store kept packed copies
        lambda conn: conn.execute(
            delete(packed_trajectories).where(packed_trajectories.c.trajectory_id.in_(ids))
        )
    )
    [old, new], _ = await store.delivered(job_id, after=0, limit=10, consumer="c", forms="packed")
    assert old.trajectories == both[0].trajectories
    assert old.packed == [None] * len(both[0].trajectories)
    assert encode_page(RawGroupPage([old, new]), as_packed) == encode_page(
        RawGroupPage(both), as_packed
    )


async def test_a_page_read_in_batches_is_the_groups_in_order_up_to_its_budget(
    store: Store,
) -> None:
    job_id = await new_job(store, 12, 2)
    for lease in await store.lease("w1", 24, 60, ["hash-t"]):
        await store.record("w1", result(lease), True)
    every, _ = await store.delivered(job_id, after=0, limit=100, consumer="c", forms="json")
    assert [g.cursor for g in every] == list(range(1, 13))
    sizes = [sum(map(len, g.trajectories)) for g in every]
    budget = sum(sizes[:6]) + 1  # past the first query's groups: crossed inside the 7th
    page, _ = await store.delivered(job_id, after=2, limit=100, consumer="c", max_bytes=budget,
                                    forms="json")  # fmt: skip
    crossed = next(n for n in range(1, 11) if sum(sizes[2 : 2 + n]) >= budget)
    assert [g.cursor for g in page] == list(range(3, 3 + crossed))
    for got, full in zip(page, every[2:], strict=False):
        assert (got.meta, got.trajectories) == (full.meta, full.trajectories)
        assert len(got.trajectories) == 2


async def test_a_groups_trajectories_come_in_episode_order_whatever_order_they_were_recorded(
    store: Store,
) -> None:
    job_id = await new_job(store, 6, 3)
    leases = await store.lease("w1", 18, 60, ["hash-t"])
    for lease in sorted(leases, key=lambda lease: -lease.index):  # the last episode first
        await store.record("w1", result(lease), True)
    for budget in (None, 1, 10**9):  # one query, one group a page, the budget's batches
        page, _ = await store.delivered(job_id, after=0, limit=100, consumer="c",
                                        max_bytes=budget)  # fmt: skip
        for group in page:
            ids = [loads(text)["episode_id"] for text in group.trajectories]
            indexes = [next(le.index for le in leases if le.episode_id == i) for i in ids]
            assert len(indexes) == 3
            assert indexes == sorted(indexes)
            assert group.packed == [packed_text(text) for text in group.trajectories]
