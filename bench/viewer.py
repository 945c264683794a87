"""Opening a big run in the viewer: a synthetic run of N trajectories (token data included).

Measured in one process, over real HTTP on loopback:
  - open: the first request of the run's page (indexing the whole file, then rendering the
    figures, the task table and the first page of episodes), fresh viewer each repetition;
  - a filtered page, a trajectory page and a group page once indexed;
  - following the run: re-indexing after 100 lines are appended;
  - baseline: ``json.loads`` of every line (what a viewer that parses the file would pay
    before showing anything), in the same run.
Target: open under 2 s for 10,000 trajectories. Prints a table, then one JSON line.

Usage: python bench/viewer.py [--n 10000] [--repeat 3] [--no-tokens]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from envfarm.api.server import ApiServer
from envfarm.testing.runs import synthetic_trajectory, write_synthetic_run
from envfarm.viewer import DirCatalog, create_viewer


async def timed_get(session: aiohttp.ClientSession, url: str) -> float:
    start = time.perf_counter()
    async with session.get(url) as response:
        await response.read()
        assert response.status == 200, (url, response.status)
    return time.perf_counter() - start


async def measure(run: Path, repeat: int, trajectory_id: str, group_id: str) -> dict[str, float]:
    opens, pages, trajectories, groups, follows = [], [], [], [], []
    for _ in range(repeat):
        async with (
            ApiServer(create_viewer(DirCatalog([run]))) as server,
            aiohttp.ClientSession() as session,
        ):
            base = f"{server.url}/runs/{run.name}"
            opens.append(await timed_get(session, base))
            pages.append(await timed_get(session, base + "?flagged=1&page=2"))
            trajectories.append(await timed_get(session, f"{base}/t/{trajectory_id}"))
            groups.append(await timed_get(session, f"{base}/groups/{group_id}"))
            rng = random.Random(7)
            with (run / "trajectories.jsonl").open("a") as lines:
                for i in range(100):
                    extra = synthetic_trajectory(
                        rng, job_id="job-grow", group_id="grp-grow", task_id="grow",
                        number=i, reward=1.0,
                    )  # fmt: skip
                    lines.write(extra.to_json() + "\n")
            follows.append(await timed_get(session, base))
    return {
        "open_s": statistics.median(opens),
        "open_max_s": max(opens),
        "filtered_page_s": statistics.median(pages),
        "trajectory_page_s": statistics.median(trajectories),
        "group_page_s": statistics.median(groups),
        "follow_100_s": statistics.median(follows),
    }


def baseline(path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as lines:
        for line in lines:
            json.loads(line)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-tokens", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "big-run"
        written = write_synthetic_run(run, args.n, group_size=8, tokens=not args.no_tokens)
        size_mb = (run / "trajectories.jsonl").stat().st_size / 1e6
        parse_s = baseline(run / "trajectories.jsonl")
        figures = asyncio.run(
            measure(run, args.repeat, written[args.n // 2].trajectory_id, written[-1].group_id)
        )
    figures.update(n=args.n, file_mb=round(size_mb, 1), baseline_parse_s=parse_s)
    figures["open_vs_parse"] = figures["open_s"] / parse_s
    for key, value in figures.items():
        print(f"{key:>20}  {value:.3f}" if isinstance(value, float) else f"{key:>20}  {value}")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
