"""Warm-environment claims through the EnvPool operator, against the in-memory Kubernetes API.

The operator (``envfarm.operator.workqueue`` running the EnvPool reconciler, the pod template
rendered from a real compose task by the pod builder) keeps a pool of ``--pool`` environments warm
on the in-memory API with its simulated kubelet (pods ready as soon as they run; ``--latency-ms``
adds a round trip to every request). Measured in one run:

- fill: environments created and ready per second, from an empty pool to ``--pool`` ready;
- gate: ``--claims`` claims arriving at ``--rate`` per second (open loop; agent-sandbox's scale
  gate is 75 claims/s with claim latency p50 <= 300 ms, p99 <= 500 ms), while the operator
  refills the pool; latency is from the request to the claimed pod, waits for a refill
  included;
- burst: the same number of claims from ``--concurrency`` claimers as fast as they go;
- baselines in the same run: one merge patch of a pod on the same API (the floor of any claim),
  and the naive claim that lists the pool for every claim instead of using the watch cache.

The reconciler reads pool members from its watch cache (``--listing``: lists them each pass).

Prints a table and, last, one JSON object. The in-memory API is one process with the operator,
so these figures are the operator's own cost, not an API server's.

    python bench/k8s_claims.py [--pool 500] [--claims 1000] [--rate 75] [--concurrency 50]
                               [--latency-ms 0] [--listing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from envfarm.k8s.api import ENV_POOLS, PODS
from envfarm.k8s.pools import NoWarmEnvironment, PoolClaimer, claim, pod_ready
from envfarm.operator.envpool import EnvPoolReconciler
from envfarm.operator.poolcache import PoolPods
from envfarm.operator.workqueue import Operator, envpool_controller
from envfarm.sandbox.kubernetes.pooltemplate import TaskTemplates
from envfarm.spec.task import load_task
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi

NS = "envfarm-sandboxes"
TASK = Path(__file__).resolve().parents[1] / "tasks" / "pg-schema-migration"
GATE_RATE, GATE_P50_MS, GATE_P99_MS = 75.0, 300.0, 500.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000


def ready_members(api: MemoryKubeApi, pool: str) -> int:
    return sum(
        1
        for _, pod in api.of_kind(PODS)
        if (pod["metadata"].get("labels") or {}).get("envfarm.dev/pool") == pool and pod_ready(pod)
    )


async def until_ready(api: MemoryKubeApi, pool: str, count: int) -> None:
    while ready_members(api, pool) < count:
        await asyncio.sleep(0.01)


async def claim_waiting(claimer: PoolClaimer, who: str) -> float:
    started = time.perf_counter()
    while True:
        try:
            await claimer.claim(who)
            return time.perf_counter() - started
        except NoWarmEnvironment:
            await asyncio.sleep(0.005)


async def open_loop(claimer: PoolClaimer, count: int, rate: float) -> tuple[list[float], float]:
    started = time.perf_counter()
    tasks = []
    for index in range(count):
        delay = started + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(claim_waiting(claimer, f"gate-{index}")))
    latencies = await asyncio.gather(*tasks)
    return list(latencies), time.perf_counter() - started


async def burst(claimer: PoolClaimer, count: int, concurrency: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    remaining = iter(range(count))
    started = time.perf_counter()

    async def worker() -> None:
        for index in remaining:
            latencies.append(await claim_waiting(claimer, f"burst-{index}"))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


async def patch_floor(api: MemoryKubeApi, samples: int) -> list[float]:
    body = {"metadata": {"name": "floor"}, "spec": {"containers": [{"name": "main"}]}}
    await api.create(PODS, NS, body)
    latencies = []
    for index in range(samples):
        started = time.perf_counter()
        await api.patch(PODS, NS, "floor", {"metadata": {"labels": {"n": str(index)}}})
        latencies.append(time.perf_counter() - started)
    await api.delete(PODS, NS, "floor", grace_period_seconds=0)
    return latencies


async def naive_claims(api: MemoryKubeApi, pool: str, count: int) -> list[float]:
    latencies = []
    for index in range(count):
        started = time.perf_counter()
        while True:
            try:
                await claim(api, NS, pool, f"naive-{index}")
                break
            except NoWarmEnvironment:
                await asyncio.sleep(0.005)
        latencies.append(time.perf_counter() - started)
    return latencies


def row(name: str, latencies: list[float], wall: float | None) -> dict[str, float]:
    rate = len(latencies) / wall if wall else 0.0
    print(
        f"| {name} | {rate:,.0f}/s | {pct(latencies, 0.5):.2f} ms | {pct(latencies, 0.99):.2f} ms |"
    )
    return {"per_s": rate, "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}


async def main(args: argparse.Namespace) -> dict[str, object]:
    api = MemoryKubeApi(latency_s=args.latency_ms / 1000)
    SimulatedKubelet(api, probe_period_s=0.01)
    task = load_task(TASK)
    operator = Operator(api, NS, workers=args.workers, retry_delay_s=0.05, resync_s=None)
    pods = None if args.listing else PoolPods(api, NS)
    reconciler = EnvPoolReconciler(api, TaskTemplates({task.id: task}), pods)
    operator.add(envpool_controller(reconciler))
    await operator.start()
    results: dict[str, object] = {"pool": args.pool, "claims": args.claims}
    results["reconciler"] = "listing" if args.listing else "watch cache"
    print("| phase | environments | claim p50 | claim p99 |")
    print("| --- | ---: | ---: | ---: |")

    started = time.perf_counter()
    pool_body = {"metadata": {"name": "bench"}, "spec": {"taskRef": {"name": task.id}}}
    pool_body["spec"]["replicas"] = args.pool
    await api.create(ENV_POOLS, NS, pool_body)
    await until_ready(api, "bench", args.pool)
    fill = time.perf_counter() - started
    print(f"| fill {args.pool} (created and ready) | {args.pool / fill:,.0f}/s | | |")
    results["fill_per_s"] = args.pool / fill

    claimer = PoolClaimer(api, NS, "bench")
    await claimer.start()
    gate, wall = await open_loop(claimer, args.claims, args.rate)
    results["gate"] = row(f"gate: {args.rate:g} claims/s offered", gate, wall)
    await until_ready(api, "bench", args.pool)
    fast, wall = await burst(claimer, args.claims, args.concurrency)
    results["burst"] = row(f"burst: {args.concurrency} claimers", fast, wall)
    await until_ready(api, "bench", args.pool)
    started = time.perf_counter()
    naive = await naive_claims(api, "bench", args.naive)
    results["naive_list_per_claim"] = row(
        "baseline: list per claim", naive, time.perf_counter() - started
    )
    await until_ready(api, "bench", args.pool)
    floor = await patch_floor(api, 200)
    results["patch_floor"] = row("baseline: one pod merge patch", floor, sum(floor))
    results["conflicts"] = claimer.conflicts
    results["reconciles"] = operator.reconciles
    results["api_calls"] = dict(api.calls)
    gate_stats = results["gate"]
    assert isinstance(gate_stats, dict)
    results["vs_gate"] = {
        "rate_ratio": gate_stats["per_s"] / GATE_RATE,
        "p50_ratio": gate_stats["p50_ms"] / GATE_P50_MS,
        "p99_ratio": gate_stats["p99_ms"] / GATE_P99_MS,
        "median_claim_over_patch_floor": statistics.median(gate) / statistics.median(floor),
    }
    await claimer.close()
    await operator.stop()
    await api.close()
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=int, default=500)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=GATE_RATE)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--naive", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument(
        "--listing", action="store_true", help="the reconciler lists pods (no watch cache)"
    )
    asyncio.run(main(parser.parse_args()))
