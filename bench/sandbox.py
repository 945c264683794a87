"""Sandbox latency on this machine: envfarm's Docker backend against the docker CLI.

Measures, in one run on the same base image, alternating blocks of envfarm and baseline
samples so that load on the machine weighs on both alike:
  - exec of `true` in a running sandbox (the command channel) vs `docker exec CONTAINER true`;
  - cold start, from creating a sandbox to its first exec done, vs `docker run --rm IMAGE true`
    (and, for reference, the same with `--network none`, which envfarm's sandboxes use);
  - a 1 MiB and a 20 MiB file written and read back vs `docker cp` in and out;
  - acquiring a started sandbox from a warm pool (an example task's environment);
  - exec of `true` in a sandbox of the workstation profile against one of the default profile
    (both through the channel), and of `sudo true` there (the helper runs it as root).
Prints a table (p50, p99, ratio = baseline p50 / envfarm p50, so above 1 means envfarm is
faster), then, as its last line, one JSON object with the headline figures.

Usage: python bench/sandbox.py [--n-exec 200] [--n-start 20] [--n-files 20]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from envfarm.plan.planner import plan_episode
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.images.task_images import ensure_base_image, ensure_recipe_image
from envfarm.sandbox.docker.images.workstation_layer import build_workstation_image
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import ensure_helper
from envfarm.sandbox.pool import WarmPools
from envfarm.settings import WORKSTATION_USER
from envfarm.spec.task import load_task

TASK = Path(__file__).resolve().parent.parent / "tasks" / "fix-lru-cache"

BENCH_LABEL = "io.envfarm.bench=sandbox"

Op = Callable[[], Awaitable[object]]


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] * 1000


async def alternate(
    n: int, ours: Op, baseline: Op, after: Op | None = None
) -> tuple[list[float], list[float]]:
    """Time ``n`` runs of each, in alternating blocks of a tenth of ``n`` (so that one side's
    aftermath, like the engine cleaning up an exec, rarely lands in the other's samples);
    ``after`` runs untimed after each of ours."""
    times: tuple[list[float], list[float]] = ([], [])
    block = max(1, n // 10)
    while len(times[1]) < n:
        for op, samples in ((ours, times[0]), (baseline, times[1])):
            for _ in range(min(block, n - len(samples))):
                start = time.perf_counter()
                await op()
                samples.append(time.perf_counter() - start)
                if after is not None and op is ours:
                    await after()
    return times


def docker_cli(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True)


async def cli(*args: str) -> None:
    await asyncio.to_thread(docker_cli, *args)


def _config(image: str) -> DockerSandboxConfig:
    return DockerSandboxConfig(image=image, run_id="bench")


async def bench_exec(image: str, n: int) -> tuple[list[float], list[float]]:
    async with DockerSandbox(_config(image)) as sandbox:
        assert isinstance(sandbox, DockerSandbox)
        cid = sandbox.container_id
        for _ in range(10):  # warm both paths up
            await sandbox.exec("true")
            await cli("exec", cid, "true")
        return await alternate(n, lambda: sandbox.exec("true"), lambda: cli("exec", cid, "true"))


async def bench_realism(
    image: str, n: int, n_start: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Exec `true` as the developer under the workstation profile, on ``image`` with the
    profile's layer as an episode has it (ours), and as root in a sandbox of the default
    profile on ``image`` itself (the baseline); and `sudo true` under the profile against
    `true` there. ``image`` is the python:3.11-slim substitute."""
    layered = await build_workstation_image(PreparedImage(tag=image, image_id=image), "/app")
    workstation = DockerSandboxConfig(
        image=layered.image_id or layered.tag, run_id="bench", realism="workstation"
    )
    async with DockerSandbox(_config(image)) as plain, DockerSandbox(workstation) as real:

        async def developer(command: str) -> None:
            await real.exec(command, user=WORKSTATION_USER)

        for _ in range(10):
            await plain.exec("true")
            await developer("true")
            await developer("sudo true")
        profile = await alternate(n, lambda: developer("true"), lambda: plain.exec("true"))
        sudo = await alternate(n, lambda: developer("sudo true"), lambda: developer("true"))

    def start(config: DockerSandboxConfig, user: str | None) -> Op:
        async def cold_start() -> None:
            async with DockerSandbox(config) as sandbox:
                assert (await sandbox.exec("true", user=user)).exit_code == 0

        return cold_start

    starts = await alternate(
        n_start, start(workstation, WORKSTATION_USER), start(_config(image), None)
    )
    return {"profile": profile, "sudo": sudo, "start": starts}


async def bench_start(image: str, n: int) -> dict[str, tuple[list[float], list[float]]]:
    started: list[DockerSandbox] = []

    async def cold_start() -> None:
        sandbox = DockerSandbox(_config(image))
        started.append(sandbox)
        await sandbox.start()
        result = await sandbox.exec("true")
        assert result.exit_code == 0

    async def stop() -> None:
        await started.pop().stop()

    run = ("run", "--rm", "--label", BENCH_LABEL)
    return {
        "bare": await alternate(n, cold_start, lambda: cli(*run, image, "true"), stop),
        "offline": await alternate(
            n, cold_start, lambda: cli(*run, "--network", "none", image, "true"), stop
        ),
    }


async def bench_files(image: str, n: int, size: int) -> tuple[list[float], list[float]]:
    payload = os.urandom(size)
    digest = hashlib.sha256(payload).digest()
    async with DockerSandbox(_config(image)) as sandbox:
        assert isinstance(sandbox, DockerSandbox)
        cid = sandbox.container_id
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "blob"
            local.write_bytes(payload)

            async def ours() -> None:
                await sandbox.write_file("/tmp/blob", payload)
                assert hashlib.sha256(await sandbox.read_file("/tmp/blob")).digest() == digest

            async def docker_cp() -> None:
                await cli("cp", str(local), f"{cid}:/tmp/blob2")
                await cli("cp", f"{cid}:/tmp/blob2", str(local) + ".back")

            return await alternate(n, ours, docker_cp)


async def bench_warm_acquire(n: int) -> list[float]:
    """Acquire from a warm pool of 2 (an example task's image), waiting for the refill between."""
    backend = DockerBackend()
    task = load_task(TASK)
    image = await backend.prepare(plan_episode(task).sandbox)
    pools = WarmPools(backend, size=2, run_id="bench")
    pools.warm(plan_episode(task).sandbox, image)
    samples = []
    try:
        for _ in range(n):
            while pools.ready(plan_episode(task).sandbox, image) < 1:
                await asyncio.sleep(0.01)
            start = time.perf_counter()
            sandbox = await pools.acquire(plan_episode(task).sandbox, image)
            samples.append(time.perf_counter() - start)
            await sandbox.stop()
    finally:
        await pools.close()
    return samples


def row(name: str, ours: list[float], base: list[float], base_name: str) -> str:
    o50, o99, b50, b99 = (
        percentile(ours, 50),
        percentile(ours, 99),
        percentile(base, 50),
        percentile(base, 99),
    )
    return (
        f"| {name} | {o50:.2f} ms | {o99:.2f} ms | {base_name} | {b50:.2f} ms | {b99:.2f} ms "
        f"| {b50 / o50:.2f}x |"
    )


async def main(n_exec: int, n_start: int, n_files: int) -> None:
    image = (await ensure_base_image()).tag
    await ensure_helper()
    exec_times = await bench_exec(image, n_exec)
    realism = await bench_realism((await ensure_recipe_image("python-slim")).tag, n_exec, n_start)
    starts = await bench_start(image, n_start)
    warm = await bench_warm_acquire(n_start)
    files = {
        "1 MiB": await bench_files(image, n_files, 1 << 20),
        "20 MiB": await bench_files(image, n_files, 20 << 20),
    }
    print(f"sandbox benchmark: image {image}, n exec={n_exec} start={n_start} files={n_files}")
    print("| operation | envfarm p50 | p99 | baseline | p50 | p99 | ratio |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    print(row("exec `true`", *exec_times, "`docker exec C true`"))
    print(row("cold start to first exec", *starts["bare"], "`docker run --rm IMAGE true`"))
    print(row("cold start to first exec", *starts["offline"], "same, `--network none`"))
    print(
        f"| warm-pool acquire | {percentile(warm, 50):.2f} ms | {percentile(warm, 99):.2f} ms "
        "| (no baseline) | | | |"
    )
    for label, (ours, base) in files.items():
        print(row(f"{label} write+read", ours, base, "`docker cp` in + out"))
    print(row("exec `true`, workstation profile", *realism["profile"], "default profile"))
    print(row("`sudo true`, workstation profile", *realism["sudo"], "`true` there"))
    print(row("start to first exec (and stop), workstation", *realism["start"], "default"))
    cold = starts["bare"][0] + starts["offline"][0]
    figures = {
        "exec_p50_ms": percentile(exec_times[0], 50),
        "exec_p99_ms": percentile(exec_times[0], 99),
        "docker_exec_p50_ms": percentile(exec_times[1], 50),
        "docker_exec_p99_ms": percentile(exec_times[1], 99),
        "cold_start_p50_ms": percentile(cold, 50),
        "cold_start_p99_ms": percentile(cold, 99),
        "docker_run_p50_ms": percentile(starts["bare"][1], 50),
        "docker_run_network_none_p50_ms": percentile(starts["offline"][1], 50),
        "warm_acquire_p50_ms": percentile(warm, 50),
        "warm_acquire_p99_ms": percentile(warm, 99),
        "file_1mib_p50_ms": percentile(files["1 MiB"][0], 50),
        "docker_cp_1mib_p50_ms": percentile(files["1 MiB"][1], 50),
        "file_20mib_p50_ms": percentile(files["20 MiB"][0], 50),
        "docker_cp_20mib_p50_ms": percentile(files["20 MiB"][1], 50),
        "workstation_exec_p50_ms": percentile(realism["profile"][0], 50),
        "default_exec_p50_ms": percentile(realism["profile"][1], 50),
        "workstation_sudo_p50_ms": percentile(realism["sudo"][0], 50),
        "workstation_start_p50_ms": percentile(realism["start"][0], 50),
        "default_start_p50_ms": percentile(realism["start"][1], 50),
    }
    exec_p50, cold_p50 = figures["exec_p50_ms"] or 1.0, figures["cold_start_p50_ms"] or 1.0
    figures["exec_speedup"] = (figures["docker_exec_p50_ms"] or 0.0) / exec_p50
    figures["cold_start_vs_docker_run"] = cold_p50 / (figures["docker_run_p50_ms"] or 1.0)
    figures["workstation_exec_ratio"] = (figures["workstation_exec_p50_ms"] or 0.0) / (
        figures["default_exec_p50_ms"] or 1.0
    )
    print(json.dumps({key: _rounded(value) for key, value in figures.items()}))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n-exec", type=int, default=200)
    parser.add_argument("--n-start", type=int, default=20)
    parser.add_argument("--n-files", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.n_exec, args.n_start, args.n_files))
