"""Several worker processes on one PostgreSQL sharing one job, with simulated latencies.

Each worker process runs the store's own work loop (``Store.lease`` in batches up to its free
slots, then per episode a simulated sandbox start and policy turns as sleeps, then
``Store.record``), keeping ``--concurrency`` episodes in flight. This measures what the store
must get right when controllers share a job: every episode leased and run once, none lost,
and the store's cost per episode as workers are added. Each worker writes the episode ids it
ran; the parent counts double runs (an id run by two workers, or twice) and lost ones (an id
of the job that no worker ran). It does not run the controller's ``Worker`` class (its
heartbeats, admission and grading): that is what bench/loop.py measures in one process.

Baseline in the same run: 1 worker on ``--baseline`` episodes; then ``--workers`` workers on
``--episodes``. Usage: python bench/workers.py --db postgresql+psycopg://... [--episodes 40000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import time
from collections import Counter
from pathlib import Path

from envfarm.controller.groups import finalize_group
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
    rng = random.Random(name)
    ran: list[str] = []
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
        await store.record(name, trajectory, final=True)
        ran.append(lease.episode_id)  # type: ignore[attr-defined]

    try:
        idle = 0
        while idle < 3:
            free = concurrency - len(running)
            leases = await store.lease(name, free, 600, ["h-shared"]) if free > 0 else []
            for lease in leases:
                task = asyncio.create_task(episode(lease))
                running.add(task)
                task.add_done_callback(running.discard)
            idle = idle + 1 if not leases and not running else 0
            await asyncio.sleep(0.05 if leases else 0.2)
        out.write_text("\n".join(ran))
    finally:
        await store.close()


def worker_main(url: str, name: str, concurrency: int, args: argparse.Namespace, out: str) -> None:
    asyncio.run(work(url, name, concurrency, args, Path(out)))


def run(url: str, workers: int, episodes: int, args: argparse.Namespace, tmp: Path) -> dict:
    job_id, _ = asyncio.run(create(url, episodes))
    outs = [tmp / f"{job_id}-{i}.txt" for i in range(workers)]
    started = time.perf_counter()
    procs = [
        multiprocessing.Process(target=worker_main,
                                args=(url, f"w{i}-{job_id}", args.concurrency, args, str(o)))
        for i, o in enumerate(outs)
    ]  # fmt: skip
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - started - 0.6  # the idle polls before a worker stops
    counts = Counter(line for o in outs if o.exists() for line in o.read_text().split())
    return {
        "workers": workers,
        "episodes": episodes,
        "ran": sum(counts.values()),
        "double_runs": sum(n - 1 for n in counts.values() if n > 1),
        "lost": episodes - len(counts),
        "wall_s": round(wall, 1),
        "episodes_per_s": round(len(counts) / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=40_000)
    parser.add_argument("--baseline", type=int, default=8_000)
    parser.add_argument("--concurrency", type=int, default=128, help="per worker")
    parser.add_argument("--sandbox-s", type=float, default=0.3)
    parser.add_argument("--policy-s", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"envfarm-bench-workers-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    one = run(args.db, 1, args.baseline, args, tmp)
    many = run(args.db, args.workers, args.episodes, args, tmp)
    ratio = many["episodes_per_s"] / one["episodes_per_s"]
    for row in (one, many):
        print(row)
    print(f"throughput {args.workers} workers vs 1: {ratio:.2f}x")
    print(json.dumps({"one": one, "many": many, "ratio": round(ratio, 2)}))


if __name__ == "__main__":
    main()
