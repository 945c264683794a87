"""The job store on a real SQLite file and a real PostgreSQL: leases, results, delivery."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from envfarm.controller.groups import finalize_group
from envfarm.errors import InvalidJobState, JobNotFound
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import ErrorInfo, Trajectory
from envfarm.store.groups import MAX_STALE_DROPS
from envfarm.store.leases import Lease
from envfarm.store.migrate import current_revision, head_revision
from envfarm.store.schema import episodes, groups
from envfarm.store.store import Store
from tests.store_fixtures import leased_result

pytestmark = pytest.mark.asyncio(loop_scope="session")
HASHES = {"a": "hash-a", "b": "hash-b"}
READY = ["hash-a", "hash-b"]


def request(**fields: Any) -> JobRequest:
    data = {"tasks": ["a"], "policy": JobPolicy(base_url="oracle"), "group_size": 2}
    return JobRequest(**{**data, **fields})


def result(lease: Lease, reward: float | None = 1.0, *, infra: bool = False) -> Trajectory:
    error = None
    if infra:
        error = ErrorInfo(type="SandboxGone", message="died", phase="agent", retryable=True)
    return leased_result(lease, [], reward=reward, error=error)


async def test_migrations_bring_the_database_to_head(store: Store) -> None:
    assert current_revision(store.engine) == head_revision() is not None
    again = await Store.open(str(store.url.render_as_string(hide_password=False)))
    await again.close()


async def test_jobs_are_listed_newest_first(store: Store) -> None:
    older = await store.create_job(request(tasks=["a"]), HASHES)
    newer = await store.create_job(request(tasks=["b"]), HASHES)
    listed = [view.id for view in await store.jobs()]
    assert listed.index(newer) < listed.index(older)


async def test_a_group_completes_once_with_advantages_and_is_delivered_in_order(
    store: Store,
) -> None:
    job = await store.create_job(request(tasks=["a", "b"]), HASHES)
    leases = await store.lease("w1", 10, 30, READY)
    assert len(leases) == 4
    assert len({lease.episode_id for lease in leases}) == 4
    by_group: dict[str, list[Lease]] = {}
    for lease in leases:
        by_group.setdefault(lease.group_id, []).append(lease)
    second, first = list(by_group.values())
    for lease, reward in zip(first, [1.0, 0.0], strict=True):
        await store.record("w1", result(lease, reward), final=True)
    page, last = await store.delivered(job, after=None, limit=10, consumer="c")
    assert last == 1
    assert [g.cursor for g in page] == [1]
    advantages = [t["advantage"] for t in page[0].parsed().trajectories]
    assert advantages == pytest.approx([1.0, -1.0], abs=1e-4)
    for lease in second:
        await store.record("w1", result(lease, 1.0), final=True)
    view = await store.job(job)
    assert view.status == "completed"
    assert view.counts.completed == 4
    assert view.counts.groups_completed == 2
    assert view.counts.mean_reward == pytest.approx(0.75)
    await store.ack(job, 1, "c")
    acked = await store.job(job)
    assert (acked.consumers, acked.counts.groups_acked) == ({"c": 1}, 1)
    page, _ = await store.delivered(job, after=None, limit=10, consumer="c")
    assert [g.cursor for g in page] == [2]
    assert page[0].meta.zero_variance is True
    other, _ = await store.delivered(job, after=None, limit=10, consumer="other")
    assert [g.cursor for g in other] == [1, 2]
    with pytest.raises(InvalidJobState):
        await store.ack(job, 7, "c")


async def test_a_retryable_failure_requeues_the_episode_and_every_attempt_is_kept(
    store: Store,
) -> None:
    job = await store.create_job(request(group_size=1, max_retries=1), HASHES)
    [lease] = await store.lease("w1", 5, 30, READY)
    assert (await store.record("w1", result(lease, None, infra=True), final=False)).status == (
        "retry"
    )
    [again] = await store.lease("w1", 5, 30, READY)
    assert again.episode_id == lease.episode_id
    assert again.attempt == 1
    recorded = await store.record("w1", result(again, 1.0), final=True)
    assert recorded.group_completed
    assert recorded.job_completed
    view = await store.job(job)
    assert view.counts.attempts == 2
    assert view.counts.valid == 1


async def test_two_stores_racing_for_leases_never_share_an_episode(
    store: Store, db_url: str
) -> None:
    await store.create_job(request(group_size=40), HASHES)
    rival = await Store.open(db_url, finalize=finalize_group)
    try:
        batches = await asyncio.gather(
            *(s.lease(f"w{i}", 7, 30, READY) for i in range(6) for s in (store, rival))
        )
    finally:
        await rival.close()
    taken = [lease.episode_id for batch in batches for lease in batch]
    assert len(taken) == len(set(taken)) == 40


async def test_an_expired_lease_is_a_lost_attempt_and_the_late_result_is_discarded(
    store: Store,
) -> None:
    job = await store.create_job(request(group_size=1), HASHES)
    [lease] = await store.lease("slow", 1, 0.01, READY)
    await asyncio.sleep(0.05)
    [again] = await store.lease("fast", 1, 30, READY)
    assert again.episode_id == lease.episode_id
    assert again.attempt == 1
    assert (await store.record("slow", result(lease), final=True)).status == "lost"
    assert (await store.record("fast", result(again), final=True)).status == "final"
    view = await store.job(job)
    assert view.counts.attempts == 2
    assert view.counts.completed == 1


async def test_a_dead_workers_leases_are_reclaimed_at_once(store: Store) -> None:
    await store.create_job(request(group_size=1), HASHES)
    await store.register_worker("gone", "host-x", 4_000_000)
    [lease] = await store.lease("gone", 1, 3600, READY)
    assert await store.lease("w2", 1, 30, READY) == []
    assert await store.reclaim_dead_workers("host-y", lambda pid: False) == 0  # other host
    assert await store.reclaim_dead_workers("host-x", lambda pid: pid != 4_000_000) == 1
    [again] = await store.lease("w2", 1, 30, READY)
    assert again.episode_id == lease.episode_id
    assert again.attempt == 1


async def test_priority_then_fair_share_then_per_job_limits(store: Store) -> None:
    low = await store.create_job(request(group_size=6, priority=0), HASHES)
    high = await store.create_job(request(group_size=3, priority=5, concurrency=2), HASHES)
    leases = await store.lease("w", 4, 30, READY)
    jobs = [lease.job_id for lease in leases]
    assert jobs.count(high) == 2
    assert jobs.count(low) == 2
    other = await store.create_job(request(group_size=6), HASHES)
    leases = await store.lease("w", 4, 30, READY)
    assert sorted(lease.job_id for lease in leases) == sorted([low, other, other, other])


def group_seqs(store: Store, job_id: str) -> dict[str, int]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(groups.c.id, groups.c.seq).where(groups.c.job_id == job_id))
        return {row.id: row.seq for row in rows}


async def test_a_jobs_groups_are_numbered_in_task_order_each_with_its_episodes(
    store: Store,
) -> None:
    tasks = [f"t{i}" for i in range(40)]
    job = await store.create_job(request(tasks=tasks, group_size=3), dict.fromkeys(tasks, "h"))
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(groups.c.id, groups.c.task_id, groups.c.seq).where(groups.c.job_id == job)
        ).all()
        members = conn.execute(
            select(
                episodes.c.group_id,
                episodes.c.task_id,
                episodes.c.index.label("position"),
                episodes.c.seq,
            )
            .where(episodes.c.job_id == job)
        ).all()  # fmt: skip
    assert sorted((row.seq, row.task_id) for row in rows) == list(enumerate(tasks, start=1))
    seq_of = {row.id: row.seq for row in rows}
    task_of = {row.id: row.task_id for row in rows}
    assert sorted((seq_of[e.group_id], e.position) for e in members) == [
        (seq, index) for seq in range(1, 41) for index in range(3)
    ]
    assert all(e.seq == seq_of[e.group_id] * 10_000 + e.position for e in members)
    assert all(e.task_id == task_of[e.group_id] for e in members)


async def test_a_jobs_leave_one_out_setting_reaches_its_groups_advantages(store: Store) -> None:
    jobs = {loo: await store.create_job(request(group_size=3, leave_one_out=loo), HASHES)
            for loo in (False, True)}  # fmt: skip
    leases = await store.lease("w", 6, 30, READY)
    for job_id in jobs.values():
        mine = sorted((lease for lease in leases if lease.job_id == job_id), key=lambda x: x.index)
        for lease, reward in zip(mine, [1.0, 0.0, 0.0], strict=True):
            await store.record("w", result(lease, reward), final=True)
    first: dict[bool, float] = {}
    for loo, job_id in jobs.items():
        [raw], _ = await store.delivered(job_id, after=0, limit=5, consumer="c")
        first[loo] = raw.parsed().trajectories[0]["advantage"]
    std = (2 / 9) ** 0.5  # of rewards 1, 0, 0
    assert first[False] == pytest.approx((1 - 1 / 3) / std, abs=1e-3)
    assert first[True] == pytest.approx((1 - 0) / std, abs=1e-3)


async def test_stale_groups_are_dropped_and_rerun_or_marked(store: Store) -> None:
    await store.publish_version("1")
    dropping = await store.create_job(request(group_size=1, max_staleness=1), HASHES)
    marking = await store.create_job(
        request(group_size=1, max_staleness=1, stale_policy="mark"), HASHES
    )
    leases = {lease.job_id: lease for lease in await store.lease("w", 2, 30, READY)}
    assert leases[dropping].dispatch_version == "1"
    await store.publish_version("2")
    await store.publish_version("3")
    assert await store.lease("w", 2, 30, READY) == []  # gate: in flight, 2 versions behind
    await store.record("w", result(leases[dropping]), final=True)
    await store.record("w", result(leases[marking]), final=True)
    view = await store.job(dropping)
    assert view.counts.groups_dropped == 1
    assert view.status == "running"
    assert (await store.delivered(dropping, after=0, limit=5, consumer="c"))[0] == []
    [rerun] = await store.lease("w", 1, 30, READY)
    assert rerun.job_id == dropping
    assert group_seqs(store, dropping) == {leases[dropping].group_id: 1, rerun.group_id: 2}
    assert rerun.dispatch_version == "3"
    [raw], _ = await store.delivered(marking, after=0, limit=5, consumer="c")
    marked = raw.parsed()
    assert marked.stale
    assert marked.staleness == 2
    assert marked.dispatch_version == "1"


async def test_job_transitions_and_unknown_jobs(store: Store) -> None:
    job = await store.create_job(request(group_size=1), HASHES)
    assert (await store.transition(job, "pause")).status == "paused"
    assert await store.lease("w", 1, 30, READY) == []
    assert (await store.transition(job, "resume")).status == "running"
    assert (await store.transition(job, "cancel")).status == "cancelled"
    with pytest.raises(InvalidJobState):
        await store.transition(job, "resume")
    with pytest.raises(JobNotFound):
        await store.job("job-nope")


async def test_api_keys_are_kept_for_workers_and_never_shown(store: Store) -> None:
    secret = request(
        policy=JobPolicy(base_url="http://x/v1", api_key="sk-secret"),
        judge={"base_url": "http://judge/v1", "api_key": "sk-judge"},
    )
    job = await store.create_job(secret, HASHES)
    shown = (await store.job(job)).model_dump_json()
    assert "sk-secret" not in shown
    assert "sk-judge" not in shown
    assert "http://judge/v1" in shown
    stored = await store.job_request(job)
    assert stored.policy.api_key is not None
    assert stored.policy.api_key.get_secret_value() == "sk-secret"
    assert stored.judge is not None
    assert stored.judge.api_key is not None
    assert stored.judge.api_key.get_secret_value() == "sk-judge"


async def test_a_job_limit_holds_across_controllers(store: Store, db_url: str) -> None:
    job = await store.create_job(request(group_size=10, concurrency=2), HASHES)
    rival = await Store.open(db_url, finalize=finalize_group)
    try:
        batches = await asyncio.gather(
            *(s.lease(f"w{i}", 3, 30, READY) for i in range(4) for s in (store, rival))
        )
    finally:
        await rival.close()
    assert sum(1 for batch in batches for lease in batch if lease.job_id == job) == 2


async def test_acks_never_move_backwards(store: Store) -> None:
    job = await store.create_job(request(tasks=["a", "b"], group_size=1), HASHES)
    for lease in await store.lease("w", 5, 30, READY):
        await store.record("w", result(lease), final=True)
    await asyncio.gather(*(store.ack(job, cursor, "t") for cursor in (2, 1, 2, 1)))
    await store.ack(job, 1, "t")
    assert (await store.job(job)).consumers == {"t": 2}


async def test_stale_drops_are_capped_then_delivered_marked(store: Store) -> None:
    await store.publish_version("v0")
    job = await store.create_job(request(group_size=1, max_staleness=0), HASHES)
    for round_ in range(MAX_STALE_DROPS + 1):
        [lease] = await store.lease("w", 1, 30, READY)
        await store.publish_version(f"v{round_ + 1}")
        await store.record("w", result(lease), final=True)
    view = await store.job(job)
    assert view.counts.groups_dropped == MAX_STALE_DROPS
    assert view.status == "completed"
    [raw], _ = await store.delivered(job, after=0, limit=5, consumer="c")
    assert raw.meta.stale
    assert raw.meta.staleness == 1


async def test_controllers_opening_a_fresh_database_together_migrate_it_once(pg_url: str) -> None:
    fresh = pg_url.rsplit("/", 1)[0] + f"/envfarm_fresh_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect("postgresql://" + pg_url.split("://", 1)[1], autocommit=True)
    with admin:
        admin.execute(f"CREATE DATABASE {fresh.rsplit('/', 1)[1]}")
    try:
        stores = await asyncio.gather(*(Store.open(fresh) for _ in range(3)))
        for opened in stores:
            assert current_revision(opened.engine) == head_revision()
            await opened.close()
    finally:
        with psycopg.connect("postgresql://" + pg_url.split("://", 1)[1], autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {fresh.rsplit('/', 1)[1]} WITH (FORCE)")


async def test_versions_published_at_once_all_get_a_place(store: Store) -> None:
    await asyncio.gather(*(store.publish_version(f"race-{i}") for i in range(6)))
    names, _current = await store.versions()
    assert {f"race-{i}" for i in range(6)} <= set(names)


async def test_a_job_ends_with_its_last_group_failed_only_if_none_completed(store: Store) -> None:
    mixed = await store.create_job(request(tasks=["a", "b"]), HASHES)
    assert await store.fail_task(mixed, "hash-a", "cannot build") is False
    assert (await store.job(mixed)).status != "failed"
    for lease in await store.lease("w1", 10, 30, ["hash-b"]):
        await store.record("w1", result(lease), final=True)
    assert (await store.job(mixed)).status == "completed"
    hopeless = await store.create_job(request(tasks=["a", "b"]), HASHES)
    assert await store.fail_task(hopeless, "hash-a", "cannot build") is False
    assert await store.fail_task(hopeless, "hash-b", "cannot build") is True
    view = await store.job(hopeless)
    assert (view.status, view.error) == ("failed", "no group of this job could run")
