"""What clean-room grading costs: oracle episodes graded in the agent's container (``shared``,
the baseline) and in a fresh one that receives the workdir's changes (``clean``).

Same tasks, same images, one episode at a time, ``--rounds`` per task and mode, interleaved.
Prints the median grading phase (``timings.grading_s``: snapshot, capture, fork, verifier) and
the median whole episode per task and mode, and the ratios clean / shared. Usage:
  python bench/grading.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
from pathlib import Path

from envfarm.controller.episode import EpisodeRunner
from envfarm.controller.job import Job
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.controller.worker import WorkerConfig
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, discover_tasks

TASKS = Path(__file__).resolve().parent.parent / "tasks"
TASK_NAMES = ["fix-lru-cache", "csv-sales-report", "pg-schema-migration"]
MODES = ("shared", "clean")


def in_mode(task: Task, mode: str) -> Task:
    verifier = task.config.verifier.model_copy(update={"environment_mode": mode})
    return dataclasses.replace(task, config=task.config.model_copy(update={"verifier": verifier}))


async def episodes(tasks: list[Task]) -> list[Trajectory]:
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=DockerBackend(), policy=policy, grader=TestScriptGrader(), run_id="bench"
        )
        result = await Job(tasks, runner, worker=WorkerConfig(concurrency=1)).run()
    assert all(t.reward.value == 1.0 for t in result.trajectories), "oracle must score 1.0"
    return result.trajectories


async def main(rounds: int) -> None:
    tasks, errors = discover_tasks([TASKS / name for name in TASK_NAMES])
    assert not errors, errors
    backend = DockerBackend()
    for task in tasks:
        await backend.prepare(plan_episode(task).sandbox)  # build outside timing
    runs: dict[tuple[str, str], list[Trajectory]] = {}
    for _ in range(rounds):  # interleaved, so drift in the machine's load hits both modes
        for task in tasks:
            for mode in MODES:
                runs.setdefault((task.id, mode), []).extend(await episodes([in_mode(task, mode)]))
    medians = {
        key: (
            statistics.median(t.timings.grading_s or 0.0 for t in done),
            statistics.median(t.timings.total_s or 0.0 for t in done),
        )
        for key, done in runs.items()
    }
    print(f"grading benchmark: {len(tasks)} tasks x {rounds} oracle episodes per mode")
    print(f"{'task':<30} {'mode':<7} {'grading':>9} {'episode':>9} {'grading vs shared':>18}")
    for task in tasks:
        base = medians[(task.id, "shared")][0]
        for mode in MODES:
            grading, total = medians[(task.id, mode)]
            print(
                f"{task.id:<30} {mode:<7} {grading:>8.2f}s {total:>8.2f}s {grading / base:>17.2f}x"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
