"""A group from one warm environment (``--fork auto``) against a group started cold, in one run.

For each group size N (``--n``, default 1,4,16), on one task (default ``bench/tasks/seeded-db``,
whose PostgreSQL sidecar seeds 4 million rows at its first start):
  - ready: the time until all N environments of the group are ready to take the agent's first
    command, every one answering ``--probe`` (for the seeded task, a query of its own
    database): cold, N environments started at once; forked, one warm environment started and
    frozen, then N copies of it made at once (the warm one's start counted); a task whose
    warm start shows that forking would not pay is not forked (its copies start cold), and the
    row says why (``not_forked``);
  - per copy, once forked: memory (the engine's figure for its containers, page cache
    included) and disk (its containers' own writable layers, as the engine counts them; a
    database's data is in its sidecar's snapshot, or a reflink copy, shared until written);
  - wall: a whole job, one group of N oracle episodes at concurrency N, ``fork off`` against
    ``fork auto``, from submission to the last trajectory (teardown in the background, as
    ``envfarm run`` does); the rewards of both must be the same.
Each measured phase starts once the machine has settled from the one before (``settle``: the
file system synced, the cores mostly idle). Cold runs stop at ``--cold-max`` (a cold group of
64 seeding at once takes many minutes on 2 cores): above it only the forked figures are
measured; whole jobs stop at ``--wall-max``.
Prints a table, one JSON object per N, and as its last line one JSON object: the figures of the
largest N with both modes measured, ``results`` holding every N.

Usage: python bench/fork.py [--task DIR] [--n 1,4,16] [--cold-max 16] [--wall-max 64]
                            [--runtime runc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.planning import Planner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import SandboxError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.plan.models import JobChoices, SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.sandbox import DockerSandbox
from envfarm.sandbox.fork import WarmParent
from envfarm.spec.task import Task, load_task

ROOT = Path(__file__).resolve().parent
TASK = ROOT / "tasks" / "seeded-db"
PROBES = {
    "seeded-db": ("psql -tAc 'SELECT 1 FROM items LIMIT 1'", "1"),
    "pg-schema-migration": (
        "psql -tAc 'SELECT version FROM schema_migrations'",
        "001_create_customers",
    ),
}
MB = 1024 * 1024
SETTLE_IDLE = 0.7
SETTLE_MAX_S = 60.0


def cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of the machine so far."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


async def settle() -> None:
    """Before each measured phase: the file system synced and the cores idle again (at least
    ``SETTLE_IDLE`` of a second idle, at most ``SETTLE_MAX_S`` of waiting), so a phase does
    not pay for the removals of the one before it (btrfs frees a removed volume's extents in
    the background)."""
    await asyncio.to_thread(os.sync)
    deadline = time.monotonic() + SETTLE_MAX_S
    while time.monotonic() < deadline:
        idle, total = cpu_times()
        await asyncio.sleep(1.0)
        idle2, total2 = cpu_times()
        if (idle2 - idle) / max(1, total2 - total) >= SETTLE_IDLE:
            return


async def answering(sandbox: Sandbox, probe: tuple[str, str]) -> None:
    result = await sandbox.exec(probe[0], timeout=120)
    if result.exit_code != 0 or result.stdout.strip() != probe[1]:
        raise RuntimeError(f"probe failed ({result.exit_code}): {result.stdout}{result.stderr}")


async def cold_ready(
    backend: DockerBackend,
    spec: SandboxSpec,
    image: PreparedImage,
    n: int,
    run_id: str,
    probe: tuple[str, str],
) -> tuple[float, list[Sandbox]]:
    sandboxes = [backend.create(spec, image, run_id=run_id) for _ in range(n)]

    async def one(sandbox: Sandbox) -> None:
        await sandbox.start()
        await answering(sandbox, probe)

    start = time.perf_counter()
    await asyncio.gather(*(one(s) for s in sandboxes))
    return time.perf_counter() - start, sandboxes


async def fork_ready(
    backend: DockerBackend,
    spec: SandboxSpec,
    image: PreparedImage,
    n: int,
    run_id: str,
    probe: tuple[str, str],
) -> tuple[float, float, list[Sandbox], WarmParent]:
    """(all ready, of which the warm parent's making, the copies, the parent). The copies
    begin as the parent does (cold ones when it is not frozen: ``WarmParent.frozen``)."""
    start = time.perf_counter()
    parent = backend.warm_parent(spec, image, run_id=run_id)

    async def warmed() -> float:
        await parent.frozen()
        return time.perf_counter() - start

    async def one() -> Sandbox:
        sandbox = await parent.fork()
        await answering(sandbox, probe)
        return sandbox

    warm, copies = await asyncio.gather(warmed(), asyncio.gather(*(one() for _ in range(n))))
    return time.perf_counter() - start, warm, list(copies), parent


def containers(sandbox: Sandbox) -> list[str]:
    if isinstance(sandbox, DockerEnvironment):
        return [sandbox.container_id, *sandbox.sidecar_ids.values()]
    assert isinstance(sandbox, DockerSandbox)
    return [sandbox.container_id]


def footprint(copies: list[Sandbox]) -> tuple[float, float]:
    """Mean (memory MB, disk MB) per copy."""
    api = docker_client().api
    memory = disk = 0
    for copy in copies:
        for container_id in containers(copy):
            stats = api.stats(container_id, stream=False, one_shot=True)
            memory += int((stats.get("memory_stats") or {}).get("usage") or 0)
            listed = api.containers(all=True, filters={"id": container_id}, size=True)
            disk += sum(int(c.get("SizeRw") or 0) for c in listed)
    return memory / len(copies) / MB, disk / len(copies) / MB


async def job_wall(
    backend: DockerBackend, task: Task, n: int, fork: Literal["auto", "off"]
) -> tuple[float, list[float | None], int]:
    """(wall, rewards, forked episodes) of one group of ``n`` oracle episodes."""
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        planner = Planner(backend, job=JobChoices(fork=fork, group_size=n))
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id=f"bench-fork-{uuid.uuid4().hex[:6]}",
            background_teardown=True,
            planner=planner,
        )
        job = Job(
            [task],
            runner,
            request_for([task], runner, group_size=n, fork=fork),
            worker=WorkerConfig(concurrency=n),
        )
        start = time.perf_counter()
        try:
            result = await job.run()
            wall = time.perf_counter() - start
        finally:
            await runner.drain()
    errors = [t.error.message for t in result.trajectories if t.error]
    assert not errors, errors
    forked = sum(1 for t in result.trajectories if t.provenance.forked_from)
    return wall, sorted(t.reward.value for t in result.trajectories), forked  # type: ignore[type-var]


async def measure(
    backend: DockerBackend,
    task: Task,
    spec: SandboxSpec,
    image: PreparedImage,
    n: int,
    cold: bool,
    probe: tuple[str, str],
    wall: bool = True,
) -> dict[str, Any]:
    run_id = f"bench-fork-{uuid.uuid4().hex[:6]}"
    row: dict[str, Any] = {"n": n}
    if cold:
        await settle()
        ready, sandboxes = await cold_ready(backend, spec, image, n, run_id, probe)
        await asyncio.gather(*(s.stop() for s in sandboxes))
        row["cold_ready_s"] = round(ready, 2)
    unsupported = backend.fork_unsupported(spec)
    if unsupported is not None:  # never forked: only the cold figures
        row["not_forked"] = unsupported
        return row if not wall else row | await walls(backend, task, n, cold)
    await settle()
    ready, warm, copies, parent = await fork_ready(backend, spec, image, n, run_id, probe)
    not_forked = await parent.frozen()
    if not_forked is not None:  # ``fork auto`` starts this task cold
        row["not_forked"] = not_forked
    else:
        row.update(fork_ready_s=round(ready, 2), warm_parent_s=round(warm, 2))
        memory, disk = await asyncio.to_thread(footprint, copies)
        row.update(mem_per_copy_mb=round(memory, 1), disk_per_copy_mb=round(disk, 2))
        if cold:
            row["ready_ratio"] = round(row["cold_ready_s"] / row["fork_ready_s"], 2)
    await asyncio.gather(*(c.stop() for c in copies))
    try:  # as a job does: what is left is the reaper's
        await parent.close()
    except SandboxError as exc:
        print(f"warning: the warm environment was not all removed: {exc}", flush=True)
    return row if not wall else row | await walls(backend, task, n, cold)


async def walls(backend: DockerBackend, task: Task, n: int, cold: bool) -> dict[str, Any]:
    """A whole job's wall with ``fork auto`` (and ``fork off`` when ``cold``)."""
    row: dict[str, Any] = {}
    if cold:
        await settle()
        cold_wall, cold_rewards, _ = await job_wall(backend, task, n, "off")
        row["cold_wall_s"] = round(cold_wall, 2)
    await settle()
    fork_wall, fork_rewards, forked = await job_wall(backend, task, n, "auto")
    row.update(fork_wall_s=round(fork_wall, 2), forked_episodes=forked)
    if cold:
        row["wall_ratio"] = round(row["cold_wall_s"] / row["fork_wall_s"], 2)
        row["rewards_identical"] = cold_rewards == fork_rewards
    row["mean_reward"] = statistics.fmean(r or 0.0 for r in fork_rewards)
    return row


async def main(
    task_dir: Path, sizes: list[int], cold_max: int, runtime: str | None, wall_max: int
) -> None:
    task = load_task(task_dir)
    backend = DockerBackend()
    planner = Planner(backend, job=JobChoices(runtime=runtime, group_size=2))
    spec = (await planner.plan(task)).sandbox
    image = await backend.prepare(spec)  # built outside timing
    probe = PROBES.get(task_dir.name, ("true", ""))
    shown = runtime or "runc"
    print(f"fork benchmark: task {task.id}, runtime {shown}, plan fork={spec.fork}")
    rows = []
    for n in sizes:
        row = await measure(backend, task, spec, image, n, n <= cold_max, probe, n <= wall_max)
        rows.append(row)
        print(json.dumps({"task": task.id, "runtime": shown, **row}), flush=True)
    print(
        f"{'n':>4} {'cold ready':>11} {'fork ready':>11} {'ratio':>6} {'cold wall':>10} "
        f"{'fork wall':>10} {'ratio':>6} {'MB/copy':>8} {'disk MB':>8}"
    )
    for r in rows:
        print(
            f"{r['n']:>4} {r.get('cold_ready_s', '-'):>11} {r.get('fork_ready_s', '-'):>11} "
            f"{r.get('ready_ratio', '-'):>6} {r.get('cold_wall_s', '-'):>10} "
            f"{r.get('fork_wall_s', '-'):>10} {r.get('wall_ratio', '-'):>6} "
            f"{r.get('mem_per_copy_mb', '-'):>8} {r.get('disk_per_copy_mb', '-'):>8}"
        )
    both = [r for r in rows if "cold_ready_s" in r] or rows
    print(json.dumps({"task": task.id, "runtime": shown, **both[-1], "results": rows}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=TASK)
    parser.add_argument("--n", default="1,4,16")
    parser.add_argument("--cold-max", type=int, default=16)
    parser.add_argument("--wall-max", type=int, default=64)
    parser.add_argument("--runtime", default=None)
    args = parser.parse_args()
    sizes = [int(part) for part in args.n.split(",")]
    asyncio.run(main(args.task.resolve(), sizes, args.cold_max, args.runtime, args.wall_max))
