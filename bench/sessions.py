"""10,000 concurrent sessions on one controller, in simulation.

N sessions run at once through the real controller (``Job``: the store-backed ``Worker``,
``EpisodeRunner``, the agent loop, grading, a SQLite file store) against the fake sandbox
backend (every command answers at once) and ``ScriptedPolicyClient`` (a zero-latency policy in
this process, no HTTP), so what is measured is envfarm's own work. Each session makes
``--turns`` bash calls, then submits; its tests "pass".

Per concurrency level, measured in one run against concurrency 1 (``--serial`` sessions one
after another, so the job's fixed cost is spread as at the other levels):

- loop overhead per turn: wall time / (sessions x model calls), and the process's CPU time
  (every thread) / model calls, which the other work on a shared machine does not inflate;
- store writes per second: INSERT/UPDATE/DELETE statements the store executed, and its
  transactions (counted by SQLAlchemy's engine events), over the level's wall time;
- memory per session: the process's peak resident memory above what it held before the
  level, divided by the concurrent sessions;
- event-loop lag p99: how late a 10 ms sleep wakes, sampled for the whole level; and the same
  lateness counted in the loop thread's CPU time (``time.thread_time``), which excludes the
  time a loaded machine did not run the process: the loop thread's CPU past the 10 ms.

Prints a Markdown table, then one JSON object. Usage:
    python bench/sessions.py [--sessions 1,1000,5000,10000] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from loop import GradingBackend, make_task
from sqlalchemy import event
from sqlalchemy.engine import Engine

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import ResolvedPolicy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.spec.task import Task
from envfarm.testing.scripted_client import ScriptedPolicyClient

GROUP_MAX = 4096
LEASE_S = 900.0


class StoreCounter:
    def __init__(self) -> None:
        self.writes = 0
        self.commits = 0
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)

    def _statement(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            self.writes += 1

    def _commit(self, conn: Any) -> None:
        self.commits += 1


class Probe:
    """Event-loop lag (how late a 10 ms sleep wakes) and peak resident memory."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.cpu_lags: list[float] = []
        """The same lateness in the loop thread's own CPU time: what the loop spent on other
        callbacks, without the time a loaded machine gave the process no core at all."""
        self.peak_rss = rss_mb()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        tick = 0
        while True:
            before, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.01)
            late = max(0.0, time.perf_counter() - before - 0.01)
            self.lags.append(late)
            self.cpu_lags.append(min(late, max(0.0, time.thread_time() - cpu - 0.01)))
            tick += 1
            if tick % 20 == 0:
                self.peak_rss = max(self.peak_rss, rss_mb())

    def __enter__(self) -> Probe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self.peak_rss = max(self.peak_rss, rss_mb())


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000


async def level(
    task: Task, sessions: int, turns: int, db: Path, counter: StoreCounter, concurrency: int
) -> dict:
    client = ScriptedPolicyClient(turns)
    policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
    runner = EpisodeRunner(
        backend=GradingBackend(), policy=policy, grader=TestScriptGrader(), run_id="sessions"
    )
    groups = -(-sessions // GROUP_MAX)
    while sessions % groups:
        groups += 1
    tasks = [dataclasses.replace(task, id=f"{task.id}-{i}") for i in range(groups)]
    job = Job(
        tasks,
        runner,
        request_for(tasks, runner, group_size=sessions // groups),
        # Leases long enough that a starved event loop (a shared machine) does not lose them
        # between renewals: the figure wanted is the loop's cost, not reruns.
        worker=WorkerConfig(concurrency=concurrency, lease_s=LEASE_S),
        store_url=f"sqlite:///{db}",
    )
    writes, commits = counter.writes, counter.commits
    before = rss_mb()
    started, cpu = time.perf_counter(), time.process_time()
    with Probe() as probe:
        result = await job.run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(result.trajectories) == sessions, "every session must be recorded"
    assert all(t.reward.valid for t in result.trajectories), "every session must be graded"
    calls = sessions * (turns + 1)
    assert client.calls == calls, (client.calls, calls)
    return {
        "concurrent": concurrency,
        "sessions": sessions,
        "wall_s": round(wall, 2),
        "per_turn_ms": round(wall / calls * 1000, 3),
        "cpu_per_turn_ms": round(cpu / calls * 1000, 3),
        "cpu_per_session_ms": round(cpu / sessions * 1000, 2),
        "store_writes_per_s": round((counter.writes - writes) / wall),
        "store_writes_per_session": round((counter.writes - writes) / sessions, 2),
        "store_transactions_per_s": round((counter.commits - commits) / wall),
        "peak_rss_mb": round(probe.peak_rss),
        "rss_per_session_kb": round((probe.peak_rss - before) * 1024 / concurrency, 1),
        "lag_p50_ms": round(pct(probe.lags, 50), 1),
        "lag_p99_ms": round(pct(probe.lags, 99), 1),
        "lag_max_ms": round(max(probe.lags or [0.0]) * 1000, 1),
        "cpu_lag_p99_ms": round(pct(probe.cpu_lags, 99), 1),
    }


async def main(levels: list[int], turns: int, serial: int) -> None:
    counter = StoreCounter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp) / "sessions")
        await level(task, 1, 1, Path(tmp) / "warm.db", counter, 1)  # imports, first store
        for n in levels:
            # one session at a time: run --serial of them so the job's fixed cost is spread
            sessions = serial if n == 1 else n
            rows.append(await level(task, sessions, turns, Path(tmp) / f"s{n}.db", counter, n))
            print(json.dumps(rows[-1]), flush=True)
    base, cpu_base = rows[0]["per_turn_ms"], rows[0]["cpu_per_turn_ms"]
    print(f"\n{turns} bash turns + submit per session; fake sandbox; in-process scripted policy")
    print("| concurrent | sessions | wall | per turn | vs 1 session | CPU per turn | vs 1 session "
          "| store writes/s | writes/session "
          "| transactions/s | peak RSS | RSS/session | lag p50 | lag p99 | lag max "
          "| lag p99 (loop CPU) |")  # fmt: skip
    print("| ---: " * 16 + "|")
    for r in rows:
        print(f"| {r['concurrent']} | {r['sessions']} | {r['wall_s']} s "
              f"| {r['per_turn_ms']:.2f} ms "
              f"| {r['per_turn_ms'] / base:.2f}x | {r['cpu_per_turn_ms']:.2f} ms "
              f"| {r['cpu_per_turn_ms'] / cpu_base:.2f}x | {r['store_writes_per_s']} "
              f"| {r['store_writes_per_session']} | {r['store_transactions_per_s']} "
              f"| {r['peak_rss_mb']} MB | {r['rss_per_session_kb']} KB | {r['lag_p50_ms']} ms "
              f"| {r['lag_p99_ms']} ms | {r['lag_max_ms']} ms "
              f"| {r['cpu_lag_p99_ms']} ms |")  # fmt: skip
    print(json.dumps({"turns": turns, "levels": rows}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", default="1,1000,5000,10000")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--serial", type=int, default=50, help="sessions run one at a time")
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.sessions.split(",")], args.turns, args.serial))
