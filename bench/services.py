"""Many environments with a PostgreSQL sidecar at once, and how many environment networks fit.

Uses an example task with a database sidecar (``pg-schema-migration``: its app container plus
``postgres:15`` with a healthcheck and init scripts), images built once beforehand:
  - alone: one environment started (network, volume, sidecar healthy, main up) and queried
    through its first exec, ``--alone`` times in a row: the baseline;
  - together: ``--n`` environments started at the same moment, each timed from its start call
    to its first query answered by its own database; then all torn down;
  - networks: ``--networks`` extra environment networks created (as envfarm creates them, a
    small subnet each) and removed, to show that hundreds fit next to the environments.
Everything created carries the bench's run id, so a killed run is reaped like any other.
Prints a table, then one JSON object as its last line.

Usage: python bench/services.py [--n 32] [--alone 3] [--networks 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from envfarm.errors import SandboxError
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_MANAGED, LABEL_OWNER, LABEL_RUN, owner_label
from envfarm.sandbox.docker.networks import create_network, remove_network, subnet_pool
from envfarm.spec.task import Task, load_task

TASK = Path(__file__).resolve().parent.parent / "tasks" / "pg-schema-migration"
QUERY = "psql -tAc 'SELECT version FROM schema_migrations'"
EXPECTED = "001_create_customers"


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] * 1000


async def one_environment(
    backend: DockerBackend, task: Task, image: PreparedImage, run_id: str
) -> tuple[float, float]:
    """(start to first query answered, teardown) in seconds; raises what the start raised."""
    sandbox = backend.create(plan_episode(task).sandbox, image, run_id=run_id)
    start = time.perf_counter()
    try:
        await sandbox.start()
        result = await sandbox.exec(QUERY, timeout=60)
        if result.exit_code != 0 or result.stdout.strip() != EXPECTED:
            raise RuntimeError(f"query failed ({result.exit_code}): {result.stdout}{result.stderr}")
        ready = time.perf_counter() - start
    finally:
        stop = time.perf_counter()
        await sandbox.stop()
    return ready, time.perf_counter() - stop


async def together(
    backend: DockerBackend, task: Task, image: PreparedImage, n: int, run_id: str
) -> tuple[list[float], list[float], list[str], float]:
    start = time.perf_counter()
    outcomes = await asyncio.gather(
        *(one_environment(backend, task, image, run_id) for _ in range(n)),
        return_exceptions=True,
    )
    wall = time.perf_counter() - start
    ready = [o[0] for o in outcomes if isinstance(o, tuple)]
    teardown = [o[1] for o in outcomes if isinstance(o, tuple)]
    errors = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)]
    return ready, teardown, errors, wall


def networks_fit(count: int, run_id: str) -> tuple[list[float], list[str], int]:
    """Create ``count`` environment networks at once (8 threads), then remove them."""
    labels = {LABEL_MANAGED: "true", LABEL_RUN: run_id, LABEL_OWNER: owner_label()}
    times: list[float] = []
    errors: list[str] = []
    created: list[str] = []

    def make(index: int) -> None:
        start = time.perf_counter()
        try:
            created.append(create_network(f"{run_id}-net{index}", labels))
        except SandboxError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            return
        times.append(time.perf_counter() - start)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(count)))
        alive = len(docker_client().api.networks(filters={"label": [f"{LABEL_RUN}={run_id}"]}))
        list(pool.map(remove_network, created))
    return times, errors, alive


def leftovers(run_id: str) -> int:
    client = docker_client()
    label = {"label": [f"{LABEL_RUN}={run_id}"]}
    found = len(client.api.containers(all=True, filters=label))
    found += len(client.api.networks(filters=label))
    return found + len(client.api.volumes(filters=label).get("Volumes") or [])


async def main(n: int, alone_rounds: int, networks: int) -> None:
    run_id = f"bench-services-{uuid.uuid4().hex[:8]}"
    backend = DockerBackend()
    task = load_task(TASK)
    image = await backend.prepare(plan_episode(task).sandbox)
    alone = [await one_environment(backend, task, image, run_id) for _ in range(alone_rounds)]
    ready, teardown, errors, wall = await together(backend, task, image, n, run_id)
    net_times, net_errors, alive = await asyncio.to_thread(networks_fit, networks, run_id)
    left = await asyncio.to_thread(leftovers, run_id)
    pool, prefix = subnet_pool()
    capacity = pool.num_addresses >> (32 - prefix)

    alone_ready = [a[0] for a in alone]
    print(f"services benchmark: task {task.id}, {n} environments at once, run {run_id}")
    print("| measure | p50 | p99 | max | total | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| 1 environment alone: start to first query | {percentile(alone_ready, 50):.0f} ms "
        f"| {percentile(alone_ready, 99):.0f} ms | | | 0 |"
    )
    if ready:
        print(
            f"| {n} at once: start to first query | {percentile(ready, 50):.0f} ms "
            f"| {percentile(ready, 99):.0f} ms | {max(ready) * 1000:.0f} ms | {wall:.1f} s "
            f"| {len(errors)} |"
        )
        print(
            f"| {n} at once: teardown | {percentile(teardown, 50):.0f} ms "
            f"| {percentile(teardown, 99):.0f} ms | {max(teardown) * 1000:.0f} ms | | |"
        )
    if net_times:
        print(
            f"| {networks} networks: create each | {percentile(net_times, 50):.0f} ms "
            f"| {percentile(net_times, 99):.0f} ms | {max(net_times) * 1000:.0f} ms "
            f"| {alive} alive at once | {len(net_errors)} |"
        )
    print(f"network pool {pool} in /{prefix} subnets: {capacity} environment networks")
    for error in errors + net_errors:
        print(f"error: {error}")
    print(f"left behind: {left}")
    figures = {
        "environments": n,
        "alone_start_p50_ms": percentile(alone_ready, 50),
        "start_p50_ms": percentile(ready, 50) if ready else None,
        "start_p99_ms": percentile(ready, 99) if ready else None,
        "total_s": wall,
        "errors": len(errors),
        "networks_created": len(net_times),
        "networks_alive_at_once": alive,
        "network_errors": len(net_errors),
        "network_capacity": capacity,
        "left_behind": left,
    }
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--alone", type=int, default=3)
    parser.add_argument("--networks", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.alone, args.networks))
