"""Sandbox latency on this machine: envfarm's Docker backend against the docker CLI.

Measures, in one run and on the same base image:
  - start+stop of one sandbox vs `docker run -d` + `docker rm -f` (the CLI baseline);
  - one exec round trip (`true`) vs `docker exec CONTAINER true`;
  - a 1 MiB file write+read vs `docker cp` in and out.
Prints absolute figures (median, p90) and ratios against the baseline. Noisy machines: read the
ratios, and run it more than once. Usage: python bench/sandbox.py [--n 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from envfarm.sandbox.docker.images import ensure_base_image
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


async def timed(n: int, op: Callable[[], Awaitable[object]]) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await op()
        samples.append(time.perf_counter() - start)
    return samples


def cli(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True)


async def main(n: int) -> None:
    image = (await ensure_base_image()).tag
    rows: list[tuple[str, list[float], list[float]]] = []

    async def envfarm_lifecycle() -> None:
        sandbox = DockerSandbox(DockerSandboxConfig(image=image, run_id="bench"))
        await sandbox.start()
        await sandbox.stop()

    async def cli_lifecycle() -> None:
        name = f"bench-{os.urandom(4).hex()}"
        await asyncio.to_thread(
            cli, "run", "-d", "--name", name, "--network", "none", image, "sleep", "infinity"
        )
        await asyncio.to_thread(cli, "rm", "-f", name)

    rows.append(("start+stop", await timed(n, envfarm_lifecycle), await timed(n, cli_lifecycle)))

    sandbox = DockerSandbox(DockerSandboxConfig(image=image, run_id="bench"))
    async with sandbox:
        cid = sandbox.container_id
        rows.append(
            (
                "exec `true`",
                await timed(n, lambda: sandbox.exec("true")),
                await timed(n, lambda: asyncio.to_thread(cli, "exec", cid, "true")),
            )
        )
        payload = os.urandom(1024 * 1024)
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "blob")
            Path(local).write_bytes(payload)

            async def envfarm_files() -> None:
                await sandbox.write_file("/tmp/blob", payload)
                assert await sandbox.read_file("/tmp/blob") == payload

            async def cli_files() -> None:
                await asyncio.to_thread(cli, "cp", local, f"{cid}:/tmp/blob2")
                await asyncio.to_thread(cli, "cp", f"{cid}:/tmp/blob2", local + ".back")

            rows.append(
                ("1 MiB write+read", await timed(n, envfarm_files), await timed(n, cli_files))
            )

    print(f"sandbox benchmark, n={n}, image {image}")
    print(
        f"{'operation':<18} {'envfarm p50':>12} {'p90':>9} {'docker CLI p50':>15} {'p90':>9}"
        f" {'ratio p50':>10}"
    )
    for name, ours, base in rows:
        (o50, o90), (b50, b90) = stats(ours), stats(base)
        print(
            f"{name:<18} {o50 * 1000:>10.1f}ms {o90 * 1000:>7.1f}ms {b50 * 1000:>13.1f}ms "
            f"{b90 * 1000:>7.1f}ms {o50 / b50:>9.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    asyncio.run(main(parser.parse_args().n))
