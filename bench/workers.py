"""Several worker processes on one PostgreSQL sharing one job, with simulated latencies.

Each worker process runs the store's own work loop (``Store.lease`` in batches up to its free
slots, then per episode a simulated sandbox start and policy turns as sleeps, then the result
recorded through the controller's ``RecordBatcher``, as the ``Worker`` does), keeping
``--concurrency`` episodes in flight. This measures what the store
must get right when controllers share a job: every episode leased and run once, none lost,
and the store's cost per episode as workers are added. Each worker writes the episode ids it
ran; the parent counts double runs (an id run by two workers, or twice) and lost ones (an id
of the job that no worker ran). It does not run the controller's ``Worker`` class (its
heartbeats, admission and grading): that is what bench/loop.py measures in one process.

The store's cost per episode is read from PostgreSQL's own counters (``pg_stat_database``:
commits, rows written, rows read, buffer accesses), before and after each run. Without
``--db`` the benchmark creates a private cluster (bench/pg_private.py) and removes it after.

Baseline in the same run: 1 worker on ``--baseline`` episodes; then ``--workers`` workers on
``--episodes``. Usage: python bench/workers.py [--db postgresql+psycopg://...] [--episodes 40000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import time
from collections import Counter
from pathlib import Path

import psycopg
from pg_private import private_postgres

from envfarm.controller.groups import finalize_group
from envfarm.controller.record_batch import RecordBatcher
from envfarm.errors import StoreError
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Provenance, Reward, Trajectory, Turn
from envfarm.store.store import Store

GROUP_SIZE = 8


async def create(url: str, episodes: int) -> tuple[str, list[str]]:
    store = await Store.open(url, finalize=finalize_group)
    try:
        tasks = [f"w/t{i}-{os.getpid()}-{time.time_ns()}" for i in range(episodes // GROUP_SIZE)]
        hashes = dict.fromkeys(tasks, "h-shared")
        request = JobRequest(tasks=tasks, policy=JobPolicy(base_url="nop"), group_size=GROUP_SIZE)
        return await store.create_job(request, hashes), ["h-shared"]
    finally:
        await store.close()


async def work(url: str, name: str, concurrency: int, args: argparse.Namespace, out: Path) -> None:
    store = await Store.open(url, finalize=finalize_group)
    records = RecordBatcher(store, name)
    rng = random.Random(name)
    ran: list[str] = []
    lost: list[str] = []
    first_lease: float | None = None
    last_record = 0.0
    store_errors = 0
    running: set[asyncio.Task[None]] = set()

    async def episode(lease: object) -> None:
        await asyncio.sleep(rng.uniform(0.5, 1.5) * args.sandbox_s)
        for _ in range(args.turns):
            await asyncio.sleep(rng.uniform(0.5, 1.5) * args.policy_s)
        trajectory = Trajectory(
            trajectory_id=f"{lease.episode_id}-a0", episode_id=lease.episode_id,  # type: ignore[attr-defined]
            job_id=lease.job_id, group_id=lease.group_id, task_id=lease.task_id,  # type: ignore[attr-defined]
            turns=[Turn(index=0, completion_token_ids=[1, 2, 3])],
            reward=Reward(value=1.0, valid=True),
            provenance=Provenance(task_hash=lease.task_hash, envfarm_version="bench"),  # type: ignore[attr-defined]
        )  # fmt: skip
        nonlocal last_record, store_errors
        while True:  # as the Worker does: a store error is retried, the result is not lost
            try:
                recorded = await records.record(trajectory, final=True)
                break
            except StoreError:
                store_errors += 1
                await asyncio.sleep(0.5)
        last_record = time.time()
        (lost if recorded.status == "lost" else ran).append(lease.episode_id)  # type: ignore[attr-defined]

    try:
        idle = 0
        while idle < 3:
            free = concurrency - len(running)
            leases = await store.lease(name, free, 600, ["h-shared"]) if free > 0 else []
            if leases and first_lease is None:
                first_lease = time.time()
            for lease in leases:
                task = asyncio.create_task(episode(lease))
                running.add(task)
                task.add_done_callback(running.discard)
            idle = idle + 1 if not leases and not running else 0
            await asyncio.sleep(0.05 if leases else 0.2)
        out.write_text("\n".join(ran))
        out.with_suffix(".json").write_text(
            json.dumps(
                {
                    "lost_leases": len(lost),
                    "batches": records.batches,
                    "store_errors": store_errors,
                    "first_lease": first_lease,
                    "last_record": last_record,
                }
            )
        )
    finally:
        await records.close()
        await store.close()


def worker_main(url: str, name: str, concurrency: int, args: argparse.Namespace, out: str) -> None:
    asyncio.run(work(url, name, concurrency, args, Path(out)))


STATS = ("xact_commit", "tup_inserted", "tup_updated", "tup_deleted", "tup_returned",
         "tup_fetched", "blks_hit", "blks_read")  # fmt: skip


def db_stats(url: str) -> dict[str, int]:
    with psycopg.connect("postgresql://" + url.split("://", 1)[1]) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            f"SELECT {', '.join(STATS)} FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return dict(zip(STATS, (int(v) for v in row), strict=True))


def run(url: str, workers: int, episodes: int, args: argparse.Namespace, tmp: Path) -> dict:
    job_id, _ = asyncio.run(create(url, episodes))
    time.sleep(1.0)  # let the statistics of the job's creation settle
    before = db_stats(url)
    outs = [tmp / f"{job_id}-{i}.txt" for i in range(workers)]
    procs = [
        multiprocessing.Process(target=worker_main,
                                args=(url, f"w{i}-{job_id}", args.concurrency, args, str(o)))
        for i, o in enumerate(outs)
    ]  # fmt: skip
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    time.sleep(1.0)
    after = db_stats(url)
    cost = {key: after[key] - before[key] for key in STATS}
    counts = Counter(line for o in outs if o.exists() for line in o.read_text().split())
    extra = [json.loads(o.with_suffix(".json").read_text()) for o in outs if o.exists()]
    # from the first lease to the last result: not the processes' start (imports) or idle end
    starts = [e["first_lease"] for e in extra if e["first_lease"] is not None]
    wall = max(e["last_record"] for e in extra) - min(starts)
    view = asyncio.run(job_view(url, job_id))
    return {
        "workers": workers,
        "episodes": episodes,
        "ran": sum(counts.values()),
        "double_runs": sum(n - 1 for n in counts.values() if n > 1),
        "lost": episodes - len(counts),
        "wall_s": round(wall, 1),
        "episodes_per_s": round(len(counts) / wall, 1),
        "lost_leases": sum(e["lost_leases"] for e in extra),
        "record_batches": sum(e["batches"] for e in extra),
        "store_errors_retried": sum(e["store_errors"] for e in extra),
        "job_status": view.status,
        "groups_delivered": view.last_cursor,
        "per_episode": {
            "commits": round(cost["xact_commit"] / episodes, 2),
            "rows_written": round(
                (cost["tup_inserted"] + cost["tup_updated"] + cost["tup_deleted"]) / episodes, 2
            ),
            "rows_read": round((cost["tup_returned"] + cost["tup_fetched"]) / episodes, 1),
            "buffer_accesses": round((cost["blks_hit"] + cost["blks_read"]) / episodes, 1),
        },
    }


async def job_view(url: str, job_id: str):  # type: ignore[no-untyped-def]
    store = await Store.open(url)
    try:
        return await store.job(job_id)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", default=None, help="default: a private cluster made for the run")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=40_000)
    parser.add_argument("--baseline", type=int, default=8_000)
    parser.add_argument("--concurrency", type=int, default=64, help="per worker")
    parser.add_argument("--sandbox-s", type=float, default=0.3)
    parser.add_argument("--policy-s", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"envfarm-bench-workers-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        url = args.db or stack.enter_context(private_postgres())
        one = run(url, 1, args.baseline, args, tmp)
        print(json.dumps(one), flush=True)
        many = run(url, args.workers, args.episodes, args, tmp)
        print(json.dumps(many), flush=True)
    ratio = many["episodes_per_s"] / one["episodes_per_s"]
    print(f"throughput {args.workers} workers vs 1: {ratio:.2f}x")
    for key in one["per_episode"]:
        print(f"store {key} per episode: {one['per_episode'][key]} with 1 worker, "
              f"{many['per_episode'][key]} with {args.workers}")  # fmt: skip
    print(json.dumps({"one": one, "many": many, "ratio": round(ratio, 2)}))


if __name__ == "__main__":
    main()
