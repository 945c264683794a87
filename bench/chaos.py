"""Chaos: one job on PostgreSQL while its server, workers, sandboxes, store and policy fail.

The benchmark creates its own PostgreSQL cluster (``initdb`` and ``pg_ctl`` on a free port and
a data directory of its own under a temporary directory, as the ``postgres`` user when run as
root), never touching the machine's. It starts ``envfarm serve --no-worker`` and two worker
processes (``envfarm.testing.chaos_worker``: ``envfarm worker``'s controller; real Docker
containers for the ``chaos/docker-*`` tasks, a self-grading fake sandbox for the rest), a
policy endpoint on loopback (``envfarm.testing.chaos_policy``: it solves every task, so every
valid reward must be 1), and a trainer consuming the job's groups with the Python client's
packed stream and background acks, reopening its stream every few groups.

Meanwhile it SIGKILLs the server and the workers at random (each restarted at once), kills
running sandbox containers of this job (found by envfarm's labels for the job's run), has the
policy return 503 storms, garbage bodies, truncated responses and slow answers, and restarts
PostgreSQL once (``pg_ctl restart -m immediate``). At the end it reports, from the trainer's
deliveries and the store's attempt rows: episodes, lost (an episode never delivered),
duplicated after acknowledgement (a group delivered at or below the cursor the server had
acknowledged when the stream opened), rerun attempts and why, and infrastructure faults
scored as rewards (a valid reward other than 1, or a valid reward on an attempt with an
infrastructure error). Usage:

    python bench/chaos.py [--fake-tasks 40] [--docker-tasks 8] [--kills 12] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envfarm.client import EnvfarmClient  # noqa: E402
from envfarm.errors import EnvfarmError  # noqa: E402
from envfarm.plan.planner import plan_episode  # noqa: E402
from envfarm.sandbox.docker.backend import DockerBackend  # noqa: E402
from envfarm.spec.task import load_task  # noqa: E402
from envfarm.testing.chaos_policy import ChaosPolicyServer, ChaosResponder  # noqa: E402
from envfarm.testing.chaos_worker import ANSWER, DOCKER_PREFIX  # noqa: E402
from envfarm.testing.pg_cluster import PrivateCluster, free_port  # noqa: E402
from tests.integration.serve_process import ChaosWorkerProcess, ServeProcess  # noqa: E402

GROUP_SIZE = 2
COMMAND = f"sleep 2; {ANSWER}"
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
[ "$(cat /app/answer.txt 2>/dev/null)" = 42 ] && echo 1 > /logs/verifier/reward.txt \\
  || echo 0 > /logs/verifier/reward.txt
"""
LABEL_RUN, LABEL_KIND = "io.envfarm.run", "io.envfarm.kind"


def write_tasks(root: Path, fake: int, docker: int) -> list[str]:
    """Task directories, Docker ones spread among the fake ones; their ids in job order."""
    ids = [f"chaos/fake-{i}" for i in range(fake)]
    for i in range(docker):
        ids.insert((i + 1) * len(ids) // (docker + 1), f"{DOCKER_PREFIX}{i}")
    for task_id in ids:
        directory = root / task_id.split("/")[1]
        docker_task = task_id.startswith(DOCKER_PREFIX)
        mode = "" if docker_task else '[verifier]\nenvironment_mode = "shared"\n'
        files = {
            "task.toml": f'[task]\nname = "{task_id}"\n{mode}[environment]\nworkdir = "/app"\n'
            "memory_mb = 256\ncpus = 0.5\n",
            "instruction.md": "Write 42 into /app/answer.txt.\n",
            "environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app\n",
            "tests/test.sh": TEST_SH,
            "solution/solve.sh": f"{ANSWER}\n",
        }
        for relative, text in files.items():
            (directory / relative).parent.mkdir(parents=True, exist_ok=True)
            (directory / relative).write_text(text)
    return ids


@dataclass
class Trainer:
    """Consumes every group once with the client's packed stream, reopening it every
    ``reopen_every`` groups; counts deliveries at or below the acknowledged cursor."""

    url: str
    job_id: str
    groups: int
    reopen_every: int = 7
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    duplicated_after_ack: int = 0
    redelivered_before_ack: int = 0
    stream_errors: Counter[str] = field(default_factory=Counter)
    sessions: int = 0

    @property
    def unique_groups(self) -> set[str]:
        return {d["group_id"] for d in self.deliveries}

    async def run(self) -> None:
        while len(self.unique_groups) < self.groups:
            try:
                await self._session()
            except EnvfarmError as exc:
                self.stream_errors[type(exc).__name__] += 1
                await asyncio.sleep(0.5)

    async def _session(self) -> None:
        async with EnvfarmClient(self.url, retry_for_s=300) as client:
            acked = (await client.job(self.job_id)).consumers.get("default", 0)
            self.sessions += 1
            taken = 0
            async for group in client.lazy_stream(self.job_id, compression="gzip", ack_every=3,
                                                  ack_interval_s=0.1):  # fmt: skip
                seen = group.meta.group_id in self.unique_groups
                if group.cursor <= acked:
                    self.duplicated_after_ack += 1
                elif seen:
                    self.redelivered_before_ack += 1
                self.deliveries.append({
                    "cursor": group.cursor, "group_id": group.meta.group_id,
                    "trajectories": [t.to_dict() for t in group.trajectories],
                })  # fmt: skip
                taken += 1
                if taken >= self.reopen_every or len(self.unique_groups) >= self.groups:
                    break


@dataclass
class Chaos:
    args: argparse.Namespace
    server: ServeProcess
    workers: list[ChaosWorkerProcess]
    cluster: PrivateCluster
    job_id: str = ""
    kills: Counter[str] = field(default_factory=Counter)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.random = random.Random(self.args.seed)

    async def _pause(self, low: float, high: float) -> bool:
        """Sleep a random while; False once the run is done."""
        try:
            await asyncio.wait_for(self.done.wait(), self.random.uniform(low, high))
        except TimeoutError:
            return True
        return False

    async def kill_server(self) -> None:
        while self.kills["server"] < self.args.kills and await self._pause(3, 6):
            self.server.kill()
            self.kills["server"] += 1
            await asyncio.to_thread(self.server.start)

    async def kill_workers(self) -> None:
        while self.kills["worker"] < self.args.kills and await self._pause(4, 8):
            worker = self.random.choice(self.workers)
            worker.kill()
            self.kills["worker"] += 1
            await asyncio.to_thread(worker.start)

    async def kill_containers(self) -> None:
        while self.kills["container"] < self.args.kills and await self._pause(2, 4):
            running = await asyncio.to_thread(self._containers)
            if running:
                target = self.random.choice(running)
                await asyncio.to_thread(subprocess.run, ["docker", "kill", target],
                                        capture_output=True, timeout=60)  # fmt: skip
                self.kills["container"] += 1

    def _containers(self) -> list[str]:
        """Running sandbox containers of this job's run, by envfarm's labels."""
        listed = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label={LABEL_RUN}={self.job_id}",
             "--filter", f"label={LABEL_KIND}=sandbox"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return listed.stdout.split()

    async def restart_store(self, trainer: Trainer) -> None:
        while len(trainer.unique_groups) < trainer.groups // 3:
            if not await self._pause(0.5, 0.5):
                return
        await asyncio.to_thread(self.cluster.restart)
        self.kills["postgresql"] += 1

    def remove_containers(self) -> None:
        mine = f"label={LABEL_RUN}={self.job_id}"
        listed = subprocess.run(["docker", "ps", "-aq", "--filter", mine], capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        if listed.stdout.split():
            subprocess.run(["docker", "rm", "-f", *listed.stdout.split()], capture_output=True,
                           timeout=120)  # fmt: skip


def attempts(url: str, job_id: str) -> list[dict[str, Any]]:
    libpq = "postgresql://" + url.split("://", 1)[1]
    with psycopg.connect(libpq) as connection:
        cursor = connection.execute(
            "SELECT episode_id, attempt, final, valid, reward, error_type, error_message, "
            "infrastructure FROM attempts WHERE job_id = %s", (job_id,),
        )  # fmt: skip
        names = [c.name for c in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def cause(row: dict[str, Any]) -> str:
    """Which injected fault an attempt that did not count most likely died of."""
    kind, message = row["error_type"] or "", (row["error_message"] or "").lower()
    if "lease" in message or "worker" in message or kind in ("LeaseLost", "WorkerLost"):
        return "worker kill (lease lost)"
    if kind == "SandboxGone" or "container" in message:
        return "container kill"
    if kind.startswith("Policy") or "policy" in message:
        return "policy fault"
    if kind == "StoreError" or "store" in message:
        return "postgresql restart"
    return f"other: {kind}: {message[:80]}"


def report(chaos: Chaos, trainer: Trainer, responder: ChaosResponder, rows: list[dict[str, Any]],
           episodes: int, wall_s: float) -> dict[str, Any]:  # fmt: skip
    finals: dict[str, dict[str, Any]] = {}
    for delivery in trainer.deliveries:
        for trajectory in delivery["trajectories"]:
            finals.setdefault(trajectory["episode_id"], trajectory)
    scored = [
        t["episode_id"] for t in finals.values()
        if t["reward"]["valid"] and (t["reward"]["value"] != 1.0
                                     or (t.get("error") or {}).get("infrastructure"))
    ]  # fmt: skip
    invalid = [t for t in finals.values() if not t["reward"]["valid"]]
    reruns = Counter(cause(row) for row in rows if not row["final"])
    return {
        "wall_s": round(wall_s, 1),
        "episodes": episodes,
        "delivered": len(finals),
        "lost": episodes - len(finals),
        "duplicated_after_ack": trainer.duplicated_after_ack,
        "redelivered_before_ack": trainer.redelivered_before_ack,
        "attempts": len(rows),
        "rerun": sum(reruns.values()),
        "rerun_by_cause": dict(reruns),
        "valid": len(finals) - len(invalid),
        "invalid_infra": len(invalid),
        "invalid_reasons": dict(Counter((t.get("error") or {}).get("type", "?") for t in invalid)),
        "infra_faults_scored": len(scored),
        "kills": dict(chaos.kills),
        "policy_faults": dict(responder.injected),
        "policy_requests": responder.requests,
        "trainer_sessions": trainer.sessions,
        "trainer_stream_errors": dict(trainer.stream_errors),
        "tracebacks_logged": {
            p.log.name: p.output().count("Traceback") for p in (chaos.server, *chaos.workers)
        },
    }


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = PrivateCluster(tmp / "pg").start()
    tasks_dir, data = tmp / "tasks", tmp / "data"
    data.mkdir()
    ids = write_tasks(tasks_dir, args.fake_tasks, args.docker_tasks)
    docker = DockerBackend()
    for task_id in ids:  # built once before the chaos, so kills never land in a first build
        if task_id.startswith(DOCKER_PREFIX):
            await docker.prepare(plan_episode(load_task(tasks_dir / task_id.split("/")[1])).sandbox)
    responder = ChaosResponder(COMMAND, rate=args.fault_rate, cap=args.kills, seed=args.seed)
    policy = ChaosPolicyServer(responder)
    await policy.start()
    common = ("--db", cluster.url, "--tasks", str(tasks_dir), "--data-dir", str(data))
    server = ServeProcess(tmp, "--no-worker", *common, "--port", str(free_port()))
    concurrency = ("--concurrency", str(args.concurrency))
    workers = [ChaosWorkerProcess(tmp, f"worker{i}", *common, *concurrency) for i in range(2)]
    chaos = Chaos(args, server, workers, cluster)
    try:
        await asyncio.to_thread(server.start)
        for worker in workers:
            await asyncio.to_thread(worker.start)
        async with EnvfarmClient(server.url, retry_for_s=120) as client:
            chaos.job_id = await client.submit({
                "tasks": ids, "group_size": GROUP_SIZE, "max_retries": 20, "max_turns": 6,
                "policy": {"base_url": policy.base_url, "model": "chaos"},
            })  # fmt: skip
        started = time.monotonic()
        trainer = Trainer(server.url, chaos.job_id, len(ids))
        faults = [asyncio.create_task(c) for c in (
            chaos.kill_server(), chaos.kill_workers(), chaos.kill_containers(),
            chaos.restart_store(trainer))]  # fmt: skip
        await asyncio.wait_for(trainer.run(), args.timeout_s)
        wall = time.monotonic() - started
        chaos.done.set()
        await asyncio.gather(*faults)
        rows = attempts(cluster.url, chaos.job_id)
        result = report(chaos, trainer, responder, rows, len(ids) * GROUP_SIZE, wall)
        for process in (server, *workers):  # the first traceback of each log, to look into
            text = process.log.read_text(errors="replace")
            if "Traceback" in text:
                start = text.index("Traceback")
                print(f"--- {process.log.name}:\n{text[max(0, start - 400) : start + 4000]}")
        return result
    finally:
        chaos.done.set()
        for process in (*workers, server):
            if process.process is not None and process.process.poll() is None:
                process.stop(signal.SIGTERM, timeout_s=60)
        await policy.close()
        if chaos.job_id:
            chaos.remove_containers()
        cluster.stop()


def print_table(result: dict[str, Any]) -> None:
    rows = [
        ("episodes", result["episodes"]), ("delivered to the trainer", result["delivered"]),
        ("lost (must be 0)", result["lost"]),
        ("duplicated after acknowledgement (must be 0)", result["duplicated_after_ack"]),
        ("delivered again before acknowledgement (allowed)", result["redelivered_before_ack"]),
        ("attempts", result["attempts"]), ("rerun attempts", result["rerun"]),
        ("valid", result["valid"]), ("invalid (infrastructure, after retries)",
                                     result["invalid_infra"]),
        ("infrastructure faults scored as rewards (must be 0)", result["infra_faults_scored"]),
        ("wall time (s)", result["wall_s"]),
    ]  # fmt: skip
    for name, value in rows:
        print(f"{name:55} {value:>8}")
    print("fault kind                                              injected  reruns it caused")
    by_cause = result["rerun_by_cause"]
    kills, faults = result["kills"], result["policy_faults"]
    kinds = [
        ("server SIGKILL", kills.get("server", 0), "-"),
        ("worker SIGKILL", kills.get("worker", 0), by_cause.get("worker kill (lease lost)", 0)),
        ("sandbox container kill", kills.get("container", 0), by_cause.get("container kill", 0)),
        ("PostgreSQL restart", kills.get("postgresql", 0), by_cause.get("postgresql restart", 0)),
        *[(f"policy: {k}", v, "") for k, v in sorted(faults.items())],
        ("policy faults, all kinds", sum(faults.values()), by_cause.get("policy fault", 0)),
    ]
    for name, injected, reruns in kinds:
        print(f"{name:55} {injected:>8}  {reruns}")
    other = {k: v for k, v in by_cause.items() if k.startswith("other")}
    if other:
        print("other reruns:", other)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fake-tasks", type=int, default=40)
    parser.add_argument("--docker-tasks", type=int, default=8)
    parser.add_argument("--kills", type=int, default=12, help="of each kind (and policy faults)")
    parser.add_argument("--concurrency", type=int, default=3, help="per worker")
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=1800)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="envfarm-chaos-"))
    tmp.chmod(0o755)  # the cluster's owner must reach its directory
    try:
        result = asyncio.run(run(args, tmp))
    finally:
        if os.environ.get("ENVFARM_CHAOS_KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
