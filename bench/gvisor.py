"""What gVisor costs on this machine: envfarm sandboxes under runsc against the same under runc.

Measures, in one run on the same base image, alternating runc and runsc samples so that load
on the machine weighs on both alike:
  - exec of `true` through the command channel;
  - cold start, from creating a sandbox to its first exec done;
  - and, for reference, `docker run --rm IMAGE true` under each runtime.
Prints a table (p50, p99, ratio = runsc p50 / runc p50, so above 1 means gVisor is slower),
then, as its last line, one JSON object with the figures.

Usage: python bench/gvisor.py [--n-exec 200] [--n-start 10] [--runtime runsc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import time
from collections.abc import Awaitable, Callable

from envfarm.sandbox.docker.images.task_images import ensure_base_image
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import ensure_helper

Op = Callable[[], Awaitable[object]]


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] * 1000


async def alternate(n: int, runc: Op, gvisor: Op) -> tuple[list[float], list[float]]:
    times: tuple[list[float], list[float]] = ([], [])
    block = max(1, n // 10)
    while len(times[1]) < n:
        for op, samples in ((runc, times[0]), (gvisor, times[1])):
            for _ in range(min(block, n - len(samples))):
                start = time.perf_counter()
                await op()
                samples.append(time.perf_counter() - start)
    return times


def sandbox(image: str, runtime: str | None) -> DockerSandbox:
    return DockerSandbox(DockerSandboxConfig(image=image, runtime=runtime, run_id="bench"))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-exec", type=int, default=200)
    parser.add_argument("--n-start", type=int, default=10)
    parser.add_argument("--runtime", default="runsc")
    args = parser.parse_args()
    image = (await ensure_base_image()).tag
    await ensure_helper()
    rows: dict[str, tuple[list[float], list[float]]] = {}

    async with sandbox(image, None) as plain, sandbox(image, args.runtime) as gvisor:
        rows["exec"] = await alternate(
            args.n_exec, lambda: plain.exec("true"), lambda: gvisor.exec("true")
        )

    async def cold(runtime: str | None) -> None:
        async with sandbox(image, runtime) as box:
            await box.exec("true")

    rows["cold_start"] = await alternate(
        args.n_start, lambda: cold(None), lambda: cold(args.runtime)
    )

    async def docker_run(runtime: str) -> None:
        argv = ["docker", "run", "--rm", "--network", "none", f"--runtime={runtime}", image, "true"]
        await asyncio.to_thread(subprocess.run, argv, check=True, capture_output=True)

    rows["docker_run"] = await alternate(
        args.n_start, lambda: docker_run("runc"), lambda: docker_run(args.runtime)
    )

    figures: dict[str, float] = {}
    print(f"{'measure':<12} {'runc p50':>9} {'runc p99':>9} {'gvisor p50':>11} {'gvisor p99':>11}")
    for name, (runc, gvisor_times) in rows.items():
        cells = [percentile(runc, 50), percentile(runc, 99)]
        cells += [percentile(gvisor_times, 50), percentile(gvisor_times, 99)]
        print(f"{name:<12} " + " ".join(f"{c:>9.1f}" for c in cells[:2]), end="")
        print(" " + " ".join(f"{c:>11.1f}" for c in cells[2:]), f"  x{cells[2] / cells[0]:.1f}")
        figures |= {
            f"runc_{name}_p50_ms": round(cells[0], 2),
            f"gvisor_{name}_p50_ms": round(cells[2], 2),
            f"gvisor_{name}_p99_ms": round(cells[3], 2),
            f"gvisor_{name}_ratio": round(cells[2] / cells[0], 2),
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
