"""The agent loop's own overhead per turn, as concurrency grows.

N sessions run at once through the real controller (Job, EpisodeRunner, agent loop, grading),
against a zero-latency policy served over loopback HTTP in this process and the fake sandbox
backend (every command answers at once), so what is measured is envfarm's own work per turn:
building the request, the HTTP round trip, parsing the completion, running the tool call,
recording the turn. Each session makes ``--turns`` bash calls, then submits. The job's own
fixed cost (opening its store, leasing, completing the group: about 50-100 ms) is spread over
the turns, so sessions are long enough (100 turns) for the per-turn figure to be the loop's.

Prints, per concurrency, wall time per turn (total wall / total turns), the p50/p99 of the
client-observed request latency, and the ratio against concurrency 1 (the baseline measured in
the same run). Usage: python bench/loop.py [--sessions 1,100,1000] [--turns 100]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import ResolvedPolicy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.plan.models import SandboxSpec
from envfarm.policy.base import ToolCallRaw
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer, Reply, completion_reply
from envfarm.sandbox.base import ExecResult, PreparedImage, Sandbox
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ok


def make_task(root: Path) -> Task:
    for sub in ("environment", "tests"):
        (root / sub).mkdir(parents=True)
    # shared: a fake sandbox has no files to carry into a clean-room verifier
    (root / "task.toml").write_text(
        '[verifier]\nenvironment_mode = "shared"\n[environment]\nworkdir = "/app"\n'
    )
    (root / "instruction.md").write_text("Run a few commands, then submit.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


def responder(turns: int) -> Any:
    async def answer(request: dict[str, Any]) -> Reply:
        done = sum(1 for m in request["messages"] if m.get("role") == "assistant")
        name, arguments = ("bash", '{"command": "true"}') if done < turns else ("submit", "{}")
        call = ToolCallRaw(id=f"call_{done}", name=name, arguments=arguments)
        return completion_reply(request.get("model", "m"), tool_calls=[call])

    return answer


class GradingBackend(FakeBackend):
    """Fake sandboxes whose tests/test.sh "passes": it writes a reward of 1. Their clock answers
    as GNU date does, so grading reuses the image's pristine state as on real images."""

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        sandbox = super().create(spec, image, run_id=run_id)
        assert isinstance(sandbox, FakeSandbox)

        def handler(command: str, sandbox: FakeSandbox = sandbox) -> ExecResult:
            if "/tests/test.sh" in command:
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n"
            elif command.startswith("date +%s"):
                return ok(f"{time.time():.9f}\n")
            return ok()

        sandbox.handler = handler
        return sandbox


def tasks_of(task: Task, sessions: int) -> list[Task]:
    """Copies of ``task`` under distinct ids, so no group exceeds the largest group size."""
    count = -(-sessions // 4000)
    while sessions % count:
        count += 1
    return [dataclasses.replace(task, id=f"{task.id}-{i}") for i in range(count)]


class LagProbe:
    """Event-loop lag: how late a 10 ms sleep wakes, sampled for the whole run."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append(max(0.0, time.perf_counter() - before - 0.01))

    def __enter__(self) -> LagProbe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def measure(task: Task, sessions: int, turns: int) -> tuple[float, list[float]]:
    async with PolicyServer(responder(turns)) as server:
        client = OpenAIPolicy(server.base_url, "m")
        policy = ResolvedPolicy(client, "bench", "m", needs_solution=False)
        runner = EpisodeRunner(
            backend=GradingBackend(), policy=policy, grader=TestScriptGrader(), run_id="bench"
        )
        tasks = [task] * 1 if sessions <= 4096 else tasks_of(task, sessions)
        size = sessions // len(tasks)
        job = Job(
            tasks,
            runner,
            request_for(tasks, runner, group_size=size),
            worker=WorkerConfig(concurrency=sessions),
        )
        start = time.perf_counter()
        before = rss_mb()
        with LagProbe() as probe:
            result = await job.run()
        wall = time.perf_counter() - start
        EXTRA[sessions] = (pct(probe.lags, 99), rss_mb(), rss_mb() - before)
        await client.aclose()
    assert all(t.reward.valid for t in result.trajectories), "every session must be graded"
    latencies = [turn.latency_s for t in result.trajectories for turn in t.turns]
    return wall / (sessions * (turns + 1)), latencies


EXTRA: dict[int, tuple[float, float, float]] = {}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000


async def main(levels: list[int], turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp) / "loop")
        await measure(task, 1, 2)  # warm up imports and the loop
        rows = [(n, *await measure(task, n, turns)) for n in levels]
    base = rows[0][1]
    print(f"agent loop overhead: {turns} bash turns + submit per session, fake sandbox")
    print("| sessions | wall per turn | request p50 | request p99 | vs 1 session "
          "| loop lag p99 | RSS after | RSS growth |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for sessions, per_turn, latencies in rows:
        lag, rss, growth = EXTRA[sessions]
        print(
            f"| {sessions} | {per_turn * 1000:.2f} ms | {pct(latencies, 50):.2f} ms "
            f"| {pct(latencies, 99):.2f} ms | {per_turn / base:.2f}x | {lag:.1f} ms "
            f"| {rss:.0f} MB | {growth:.0f} MB |"
        )
    sessions, _, latencies = rows[-1]
    median_ms = statistics.median(latencies) * 1000
    print(f"median request latency at {sessions} sessions: {median_ms:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", default="1,100,1000")
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.sessions.split(",")], args.turns))
