"""100 step-API sessions through OpenEnv's own client, against a REST job of the same episodes.

One ``envfarm serve`` (a real process, the real engine, ``--concurrency C``) serves both, in
one run:

- **baseline**: a REST job of N ``nop`` episodes of the task (the built-in loop submits at once),
  run at the server's concurrency and read back with the trainer's client;
- **graded sessions**: N sessions of the same task, C at a time, each driven by an unmodified
  ``openenv-core`` ``GenericEnvClient`` over ``/v1/openenv/TOKEN/ws``: ``reset``, one ``bash``
  step, ``submit`` (graded as the job's episodes are);
- **abandoned sessions**: N more, each closing its connection after the ``bash`` step without a
  word (recorded ungraded, its sandbox reclaimed).

Prints the wall time of each, the graded sessions' against the job's, the sessions' reset, step
and submit latencies (p50/p95), how many were recorded graded and abandoned, and the containers
left behind by any of the 2N session jobs once the server has stopped (must be 0); the last
line is one JSON object.
Exits 1 when a session failed, a record is missing or a container leaked. Not part of the test
command.

    python bench/openenv_sessions.py [--sessions 100] [--concurrency 4]
        [--task tasks/word-count-cli] [--warm-pool 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
from openenv.core import GenericEnvClient

from envfarm.client import EnvfarmClient
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.store.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.integration.serve_process import ServeProcess

TOKEN = "bench-sessions-token"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


async def baseline(server: ServeProcess, task: str, n: int) -> float:
    body = {"tasks": [task], "group_size": n, "policy": {"base_url": "nop"}, "max_retries": 0}
    started = time.monotonic()
    async with EnvfarmClient(server.url, token=TOKEN) as client:
        [info] = await client.tasks()
        body["tasks"] = [info.id]
        job_id = await client.submit(body)
        async for group in client.groups(job_id):
            assert len(group.trajectories) == n, group
    return time.monotonic() - started


async def one_session(url: str, task: str, abandon: bool, out: dict[str, list[Any]]) -> None:
    env = GenericEnvClient(base_url=url, message_timeout_s=600)
    t0 = time.monotonic()
    opened = await env.reset(task=task)
    t1 = time.monotonic()
    await env.step({"tool": "bash", "arguments": {"command": "ls -la && true"}})
    t2 = time.monotonic()
    out["jobs"].append(opened.observation["job_id"])
    out["reset_s"].append(t1 - t0)
    out["step_s"].append(t2 - t1)
    if not abandon:
        ended = await env.step({"tool": "submit", "arguments": {}})
        out["submit_s"].append(time.monotonic() - t2)
        assert ended.done, ended
        assert ended.observation["reward_valid"], ended
        out["graded"].append(ended.reward)
        await env.disconnect()
    else:  # the trainer goes away: no close message
        assert env._ws is not None
        await env._ws.close()


async def sessions(
    server: ServeProcess, task: str, n: int, c: int, abandon: bool
) -> tuple[float, dict[str, Any]]:
    url = f"{server.url}/v1/openenv/{TOKEN}"
    out: dict[str, list[Any]] = {k: [] for k in ("jobs", "reset_s", "step_s", "submit_s", "graded")}
    gate = asyncio.Semaphore(c)
    failures: list[str] = []

    async def run(index: int) -> None:
        async with gate:
            try:
                await one_session(url, task, abandon, out)
            except Exception as exc:
                failures.append(f"session {index}: {exc!r}")

    started = time.monotonic()
    await asyncio.gather(*(run(i) for i in range(n)))
    wall = time.monotonic() - started
    out["failures"] = failures
    return wall, out


async def recorded(db: Path, jobs: list[str]) -> dict[str, int]:
    store = await Store.open(f"sqlite:///{db}")
    counts = {"graded": 0, "abandoned": 0, "missing": 0}
    try:
        for job_id in jobs:
            deadline = time.monotonic() + 120
            while not (found := await store.trajectories(job_id)) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            if not found:
                counts["missing"] += 1
            elif (found[0].get("error") or {}).get("type") == "SessionAbandoned":
                counts["abandoned"] += 1
            else:
                counts["graded"] += 1
    finally:
        await store.close()
    return counts


def leaked(jobs: list[str]) -> int:
    client = docker.from_env()
    return sum(
        len(client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={job}"}))
        for job in jobs
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--task", type=Path, default=Path("tasks/word-count-cli"))
    parser.add_argument("--warm-pool", type=int, default=0, help="the server's --warm-pool")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="envfarm-openenv-bench-"))
    shutil.copytree(args.task, root / "tasks" / args.task.name)
    flags = ["--concurrency", str(args.concurrency), "--warm-pool", str(args.warm_pool)]
    server = ServeProcess(root, "--tasks", "tasks", "--data-dir", "data", *flags, token=TOKEN)
    server.start()
    try:
        base_s = await baseline(server, args.task.name, args.sessions)
        wall_s, out = await sessions(server, args.task.name, args.sessions, args.concurrency, False)
        gone_s, dropped = await sessions(
            server, args.task.name, args.sessions, args.concurrency, True
        )
        jobs = out["jobs"] + dropped["jobs"]
        counts = await recorded(root / "data" / "envfarm.db", jobs)
    finally:
        code = server.stop()
    left = leaked(jobs)
    failures = out["failures"] + dropped["failures"]
    result = {
        "sessions": args.sessions,
        "concurrency": args.concurrency,
        "warm_pool": args.warm_pool,
        "task": args.task.name,
        "baseline_job_s": round(base_s, 2),
        "sessions_s": round(wall_s, 2),
        "ratio": round(wall_s / base_s, 2),
        "abandoned_sessions_s": round(gone_s, 2),
        "reset_p50_s": round(pct(out["reset_s"] + dropped["reset_s"], 0.5), 3),
        "reset_p95_s": round(pct(out["reset_s"] + dropped["reset_s"], 0.95), 3),
        "step_p50_s": round(pct(out["step_s"], 0.5), 3),
        "submit_p50_s": round(pct(out["submit_s"], 0.5), 3),
        "submit_p95_s": round(pct(out["submit_s"], 0.95), 3),
        "mean_reward": round(statistics.fmean(out["graded"]), 3) if out["graded"] else None,
        **counts,
        "failures": len(failures),
        "leaked_containers": left,
        "server_exit": code,
    }
    print(f"baseline: a REST job of {args.sessions} nop episodes: {base_s:.1f} s")
    print(f"graded sessions: {args.sessions} OpenEnv sessions, {args.concurrency} at a time: "
          f"{wall_s:.1f} s ({wall_s / base_s:.2f}x the job); {args.sessions} abandoned: "
          f"{gone_s:.1f} s")  # fmt: skip
    print(f"reset p50 {result['reset_p50_s']} s p95 {result['reset_p95_s']} s; submit p50 "
          f"{result['submit_p50_s']} s p95 {result['submit_p95_s']} s")  # fmt: skip
    print(f"recorded: {counts}; failures: {failures[:3]}; leaked containers: {left}")
    print(json.dumps(result))
    bad = failures or counts["missing"] or left or code != 0
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
