"""Every engine call and helper round trip of single-container oracle episodes, timed.

Runs ``--episodes`` oracle episodes of one example task one after the other (concurrency 1),
recording each Docker API request (method, path, start offset and duration from the episode's
start) and each request on the helper's channel (op, and the command's first words for an
exec), then prints, per episode, the timeline and the phase timings of its trajectory, and a
table of medians per call across episodes. Usage:
  python bench/setup_calls.py [--task fix-lru-cache] [--episodes 3] [--tree PATH]
``--tree``: import envfarm from that checkout instead (a before/after pair in one session).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

TASKS = Path(__file__).resolve().parent.parent / "tasks"
_events: list[tuple[float, float, str, str]] = []
_lock = threading.Lock()
_origin = [time.monotonic()]


def _record(start: float, kind: str, label: str) -> None:
    end = time.monotonic()
    with _lock:
        _events.append((start - _origin[0], end - start, kind, label))


_ID = re.compile(r"/[0-9a-f]{12,64}")


def _instrument() -> None:
    import docker.api.client

    from envfarm.sandbox.channel.client import Channel

    original = docker.api.client.APIClient.request

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return original(self, method, url, *args, **kwargs)
        finally:
            path = _ID.sub("/ID", url.split("/v1.", 1)[-1].split("/", 1)[-1])
            _record(start, "engine", f"{method} /{path}")

    docker.api.client.APIClient.request = request  # type: ignore[method-assign]

    original_request = Channel._request

    async def channel_request(self: Any, header: dict[str, Any], *args: Any, **kw: Any) -> Any:
        start = time.monotonic()
        try:
            return await original_request(self, header, *args, **kw)
        finally:
            op = str(header.get("op"))
            argv = header.get("argv") or header.get("command") or header.get("path") or ""
            what = " ".join(argv)[:48] if isinstance(argv, list) else str(argv)[:48]
            _record(start, "channel", f"{op} {what}".strip())

    Channel._request = channel_request  # type: ignore[method-assign]


async def run(task_name: str, episodes: int) -> tuple[list[dict[str, Any]], list[float]]:
    from envfarm.controller.episode import EpisodeRunner
    from envfarm.controller.job import Job, request_for
    from envfarm.controller.policies import PolicySpec, open_policy
    from envfarm.controller.worker import WorkerConfig
    from envfarm.grading.verifier.script import TestScriptGrader
    from envfarm.sandbox.docker.backend import DockerBackend
    from envfarm.spec.task import discover_tasks

    tasks, errors = discover_tasks([TASKS / task_name])
    assert not errors, errors
    backend = DockerBackend()
    try:  # a tree from before the episode plan (--tree) prepares a task
        from envfarm.plan.planner import plan_episode

        image = (await backend.prepare(plan_episode(tasks[0]).sandbox)).image_id
    except ImportError:
        image = (await backend.prepare(tasks[0])).image_id  # type: ignore[arg-type]
    bare = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(
            ["docker", "run", "--rm", "--network", "none", str(image), "true"],
            check=True,
            capture_output=True,
        )
        bare.append(time.monotonic() - start)
    out = []
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="bench-setup"
        )
        for index in range(episodes + 1):  # the first warms the caches, not reported
            with _lock:
                _events.clear()
            _origin[0] = time.monotonic()
            job = Job(
                tasks,
                runner,
                request_for(tasks, runner, group_size=1),
                worker=WorkerConfig(concurrency=1),
            )
            result = await job.run()
            wall = time.monotonic() - _origin[0]
            trajectory = result.trajectories[0]
            assert trajectory.reward.value == 1.0, trajectory.reward
            if index:
                out.append(
                    {
                        "wall": wall,
                        "events": sorted(_events),
                        "timings": trajectory.timings.model_dump(),
                    }
                )
    return out, bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fix-lru-cache")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--tree")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
        os.chdir(args.tree)
    _instrument()
    results, bare = asyncio.run(run(args.task, args.episodes))
    print(
        f"load average {os.getloadavg()}; bare docker run --rm true: "
        f"median {statistics.median(bare):.3f} s"
    )
    by_label: dict[str, list[float]] = {}
    for number, result in enumerate(results, 1):
        print(f"\nepisode {number}: wall {result['wall']:.3f} s")
        t = result["timings"]
        print("  " + ", ".join(f"{k} {v:.3f}" for k, v in t.items() if isinstance(v, float)))
        for offset, duration, kind, label in result["events"]:
            print(f"  {offset:7.3f} +{duration:6.3f}  {kind:7} {label}")
            by_label.setdefault(f"{kind} {label}", []).append(duration)
    leads = []
    for result in results:
        events = result["events"]
        solved = next(o + d for o, d, _, label in events if "solve.sh" in label)
        verifier = next(o for o, _, _, label in events if label.startswith("exec cd / ||"))
        leads.append(verifier - solved)
    print(
        "\nmedians: "
        + ", ".join(
            f"{key} {statistics.median(r['timings'][key] for r in results):.3f}"
            for key in ("provision_s", "grading_s", "teardown_s", "total_s")
        )
        + f", solve.sh end -> verifier's first command {statistics.median(leads):.3f}"
    )
    print("\nmedian per call (count over all episodes):")
    for label, durations in sorted(by_label.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {statistics.median(durations):7.3f} s x{len(durations):3}  {label}")


if __name__ == "__main__":
    main()
