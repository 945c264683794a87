"""What a disk limit costs a sandbox on this engine (``DOCKER_HOST``): start and teardown.

In one run on the base image, alternating blocks of each variant so that load on the machine
weighs on all alike:
  - envfarm cold start (create to first exec done) and teardown, with ``storage_mb`` set (a
    ``--storage-opt size`` when the engine enforces one) and without;
  - ``docker run --rm --network none IMAGE true`` for reference.
Run it once per engine configuration (overlay2 on ext4, btrfs with simple quotas, btrfs with
full qgroups) and compare the ratios. Prints a table, then one JSON object as its last line.

Usage: python bench/storage.py [--n 30] [--storage-mb 10240]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import time
from collections.abc import Awaitable, Callable

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import ensure_base_image
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER, owner_label
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import ensure_helper
from envfarm.sandbox.docker.storage import storage_support

BENCH_LABEL = "io.envfarm.bench=storage"


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] * 1000


async def sandbox_cycle(image: str, storage_mb: int | None) -> tuple[float, float]:
    sandbox = DockerSandbox(DockerSandboxConfig(image=image, storage_mb=storage_mb, run_id="bench"))
    start = time.perf_counter()
    await sandbox.start()
    assert (await sandbox.exec("true")).exit_code == 0
    started = time.perf_counter()
    await sandbox.stop()
    return started - start, time.perf_counter() - started


async def docker_run(image: str) -> tuple[float, float]:
    start = time.perf_counter()
    command = ["docker", "run", "--rm", "--network", "none", "--label", BENCH_LABEL, image, "true"]
    await asyncio.to_thread(subprocess.run, command, check=True, capture_output=True)
    return time.perf_counter() - start, 0.0


async def main(n: int, storage_mb: int) -> None:
    image = (await ensure_base_image()).tag
    await ensure_helper()
    labels = {LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()}
    support = await asyncio.to_thread(storage_support, image, labels)
    variants: dict[str, Callable[[], Awaitable[tuple[float, float]]]] = {
        f"envfarm, storage_mb={storage_mb}": lambda: sandbox_cycle(image, storage_mb),
        "envfarm, no limit": lambda: sandbox_cycle(image, None),
        "`docker run --rm --network none`": lambda: docker_run(image),
    }
    for variant in variants.values():  # warm up
        await variant()
    starts: dict[str, list[float]] = {name: [] for name in variants}
    stops: dict[str, list[float]] = {name: [] for name in variants}
    block = max(1, n // 10)
    while len(starts["envfarm, no limit"]) < n:
        for name, variant in variants.items():
            for _ in range(min(block, n - len(starts[name]))):
                start_s, stop_s = await variant()
                starts[name].append(start_s)
                stops[name].append(stop_s)
    info = await asyncio.to_thread(docker_client().info)
    enforced = "enforced" if support.enforced else f"NOT enforced ({support.reason})"
    print(f"storage benchmark: {support.describe()}, limits {enforced}; n={n}")
    print("| variant | start p50 | start p99 | teardown p50 | teardown p99 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in variants:
        print(
            f"| {name} | {percentile(starts[name], 50):.0f} ms | "
            f"{percentile(starts[name], 99):.0f} ms | {percentile(stops[name], 50):.0f} ms | "
            f"{percentile(stops[name], 99):.0f} ms |"
        )
    limited, unlimited, run = (list(variants)[i] for i in range(3))
    figures = {
        "driver": info.get("Driver"),
        "enforced": support.enforced,
        "start_limited_p50_ms": percentile(starts[limited], 50),
        "start_unlimited_p50_ms": percentile(starts[unlimited], 50),
        "teardown_limited_p50_ms": percentile(stops[limited], 50),
        "teardown_unlimited_p50_ms": percentile(stops[unlimited], 50),
        "docker_run_p50_ms": percentile(starts[run], 50),
    }
    print(
        json.dumps({key: round(v, 2) if isinstance(v, float) else v for key, v in figures.items()})
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--storage-mb", type=int, default=10240)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.storage_mb))
