"""Whole oracle episodes: envfarm against a bare docker-CLI pipeline doing the same work.

The baseline is the least a harness must do per episode, scripted with the docker CLI: start a
container from the task image, copy the solution in and run it, copy the tests in and run them,
read the reward, remove the container. envfarm does the same through its policy server, agent
loop and grader. Both run each example task ``--rounds`` times, sequentially (concurrency 1),
then envfarm runs the same episodes with ``--concurrency`` to show throughput.
Prints per-episode medians, episodes per minute and the ratios. Usage:
  python bench/episode.py [--rounds 3] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
from pathlib import Path

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, discover_tasks

TASKS = Path(__file__).resolve().parent.parent / "tasks"
# Single-container tasks only: the CLI baseline cannot start sidecar services.
TASK_NAMES = ["csv-sales-report", "fix-interval-merge", "fix-lru-cache", "word-count-cli"]


def cli(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout


def baseline_episode(task: Task, image: str) -> float:
    start = time.perf_counter()
    workdir = task.config.environment.workdir or "/"
    cid = cli("run", "-d", "--network", "none", "-w", workdir, image, "sleep", "infinity").strip()
    try:
        assert task.solution_dir is not None
        cli("cp", f"{task.solution_dir}/.", f"{cid}:/solution")
        cli("exec", cid, "bash", "/solution/solve.sh")
        cli("cp", f"{task.tests_dir}/.", f"{cid}:/tests")
        cli(
            "exec",
            cid,
            "bash",
            "-c",
            "mkdir -p /logs/verifier && bash /tests/test.sh "
            "> /logs/verifier/out.txt 2>&1; cat /logs/verifier/reward.*",
        )
    finally:
        cli("rm", "-f", cid)
    return time.perf_counter() - start


async def envfarm_episodes(
    tasks: list[Task], rounds: int, concurrency: int
) -> tuple[float, list[float]]:
    backend = DockerBackend()
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="bench"
        )
        job = Job(
            tasks,
            runner,
            request_for(tasks, runner, group_size=rounds),
            worker=WorkerConfig(concurrency=concurrency),
        )
        start = time.perf_counter()
        result = await job.run()
        wall = time.perf_counter() - start
    assert all(t.reward.value == 1.0 for t in result.trajectories), "oracle must score 1.0"
    return wall, [t.timings.total_s or 0.0 for t in result.trajectories]


async def main(rounds: int, concurrency: int) -> None:
    tasks, errors = discover_tasks([TASKS / name for name in TASK_NAMES])
    assert not errors, errors
    backend = DockerBackend()
    images = {
        task.id: (await backend.prepare(plan_episode(task).sandbox)).tag for task in tasks
    }  # build outside timing
    n = len(tasks) * rounds

    start = time.perf_counter()
    base = [baseline_episode(t, images[t.id]) for _ in range(rounds) for t in tasks]
    base_wall = time.perf_counter() - start
    seq_wall, seq = await envfarm_episodes(tasks, rounds, 1)
    par_wall, _ = await envfarm_episodes(tasks, rounds, concurrency)

    def per_min(wall: float) -> float:
        return n / wall * 60

    print(f"episode benchmark: {len(tasks)} tasks x {rounds} rounds = {n} oracle episodes")
    print(f"{'pipeline':<34} {'median episode':>15} {'episodes/min':>13} {'vs baseline':>12}")
    print(
        f"{'docker CLI baseline, sequential':<34} {statistics.median(base):>14.2f}s "
        f"{per_min(base_wall):>13.1f} {'1.00x':>12}"
    )
    print(
        f"{'envfarm, concurrency 1':<34} {statistics.median(seq):>14.2f}s "
        f"{per_min(seq_wall):>13.1f} {base_wall / seq_wall:>11.2f}x"
    )
    print(
        f"{f'envfarm, concurrency {concurrency}':<34} {'':>15} "
        f"{per_min(par_wall):>13.1f} {base_wall / par_wall:>11.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.concurrency))
