"""Placement of one job's 100,000 environments over 8 simulated clusters, one failing.

Drives the controller's own placement code (``envfarm.sandbox.placement.placer``: ``Placer`` and
``PlacementQueue``) against simulated backends: each cluster has a quota, a limit on starts in
flight (its API server and kubelets), a start latency drawn from a log-normal (median
``--start-s``, long tail) plus an image pull when the image is not there yet. Environments stay
up once started (the question is time to all-started). At ``--fail-at-s`` one cluster is lost
whole: every environment it held or was starting returns to the queue as a lost attempt and
runs elsewhere. Time is simulated: the run is on ``envfarm.testing.virtual_clock``'s loop, whose
clock jumps to the next timer whenever nothing is ready, so the simulated figures do not depend
on how busy the machine is; only the real run time does.

Reports: time to all-started (simulated seconds), the real run time, episodes lost (must be
0), reruns, and placement spread / locality. Usage: python bench/placement.py [--envs 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass, field

from envfarm.sandbox.placement.placer import BackendLost, Episode, PlacementQueue, Placer, Slot
from envfarm.testing import virtual_clock


@dataclass
class Cluster:
    name: str
    starts_in_flight: int
    start_s: float
    pull_s: float
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Semaphore = field(init=False)
    started: int = 0
    pulls: int = 0

    def __post_init__(self) -> None:
        self.gate = asyncio.Semaphore(self.starts_in_flight)


class Simulation:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(7)
        self.up: set[object] = set()
        self.all_started_at: float | None = None
        self.clusters = [
            Cluster(f"cluster-{i}", args.in_flight, args.start_s * (0.7 + 0.1 * i), args.pull_s)
            for i in range(args.clusters)
        ]
        quota = int(args.envs * args.headroom / (args.clusters - 1))
        slots = [Slot(c.name, c, quota) for c in self.clusters]
        self.queue: PlacementQueue[Cluster] = PlacementQueue(Placer(slots), self.start)
        self.hold = asyncio.Event()

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def start(self, slot: Slot[Cluster], episode: Episode) -> None:
        cluster = slot.handle
        async with cluster.gate:
            latency = self.rng.lognormvariate(0, 0.5) * cluster.start_s
            if episode.image not in slot.images:
                latency += cluster.pull_s
                cluster.pulls += 1
                slot.images.add(episode.image)  # the pull is under way: later starts share it
            await self.sleep(latency, cluster)
        cluster.started += 1
        self.up.add(episode.key)
        if len(self.up) == self.args.envs and self.all_started_at is None:
            self.all_started_at = self.now()
            self.hold.set()
        try:
            await self.hold.wait()
        finally:
            if cluster.failed.is_set():
                self.up.discard(episode.key)

    async def sleep(self, seconds: float, cluster: Cluster) -> None:
        if cluster.failed.is_set():
            raise BackendLost(f"{cluster.name} is gone")
        await asyncio.sleep(seconds)

    async def fail_one(self) -> int:
        await asyncio.sleep(self.args.fail_at_s)
        victim = self.clusters[self.args.clusters // 2]
        victim.failed.set()
        held = [key for key, where in self.queue.placer.placed.items() if where == victim.name]
        self.up.difference_update(held)
        return len(self.queue.lose(victim.name))

    async def run(self) -> dict[str, object]:
        images = [f"task-image-{i}" for i in range(self.args.images)]
        episodes = [Episode(key=i, image=images[i % len(images)]) for i in range(self.args.envs)]
        self.queue.submit(episodes)
        failing = asyncio.create_task(self.fail_one())
        wall = time.perf_counter()
        await self.queue.drain(lambda: self.hold.is_set())
        wall = time.perf_counter() - wall
        lost_at_failure = await failing
        running = len(self.queue.running)
        figures: dict[str, object] = {
            "environments": self.args.envs,
            "clusters": self.args.clusters,
            "time_to_all_started_s": round(self.all_started_at or -1, 1),
            "real_run_s": round(wall, 1),
            "held_by_failed_cluster": lost_at_failure,
            "reruns": self.queue.lost_attempts,
            "episodes_lost": self.args.envs - len(self.up),
            "running_at_end": running,
            "queued_at_end": len(self.queue.queue),
            "started_per_cluster": {c.name: c.started for c in self.clusters},
            "image_pulls": sum(c.pulls for c in self.clusters),
        }
        self.hold.set()
        for _, task in list(self.queue.running.values()):
            task.cancel()
        return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--envs", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--in-flight", type=int, default=400, help="starts in flight per cluster")
    parser.add_argument("--start-s", type=float, default=4.0, help="median pod start")
    parser.add_argument("--pull-s", type=float, default=20.0, help="image pull when absent")
    parser.add_argument("--fail-at-s", type=float, default=60.0)
    parser.add_argument("--headroom", type=float, default=1.05, help="total quota / envs, 7 up")
    figures = await Simulation(parser.parse_args()).run()
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    virtual_clock.run(main())
