"""Installed agents on every example task: mini-swe-agent and Codex CLI, token-exact.

For each agent, one ``envfarm run`` over the task directories (default: every task under
``tasks/``), the model being the fake vLLM server scripted to answer in that agent's own
format with each task's reference solution (``envfarm.testing.agent_scripts``). Prints per
task: reward, turns, whether every turn's token ids and logprobs equal what the server sent,
the network mode, and the agent's wall time; then the job's totals and the load average.

Usage: ``python bench/installed_agents.py [--agent mini-swe-agent] [--agent codex]
[--concurrency 2] [TASK_DIR...]``. The first run per task image builds the agent's layer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from envfarm.policy import PolicyServer
from envfarm.spec.task import load_task
from envfarm.testing.agent_scripts import AGENT_PLANNERS, oracle_planner
from envfarm.testing.fake_vllm import FakeVLLM

REPO = Path(__file__).resolve().parents[1]
Tokens = tuple[tuple[int, ...], tuple[float, ...]]


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _sent(fake: FakeVLLM) -> Counter[Tokens]:
    return Counter(
        (
            tuple(reply.body["choices"][0]["token_ids"]),
            tuple(c["logprob"] for c in reply.body["choices"][0]["logprobs"]["content"]),
        )
        for reply in fake.replies
        if isinstance(reply.body, dict)
    )


async def run_agent(agent: str, task_dirs: list[Path], concurrency: int) -> None:
    fake = FakeVLLM(planner=oracle_planner(agent, task_dirs), version="7")
    with tempfile.TemporaryDirectory(prefix="envfarm-bench-agents-") as tmp:
        out = Path(tmp) / "out"
        start, load_before = time.monotonic(), _load()
        async with PolicyServer(fake) as server:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "envfarm",
                "run",
                *map(str, task_dirs),
                "--policy",
                server.base_url,
                "--model",
                "m",
                "--agent",
                agent,
                "--concurrency",
                str(concurrency),
                "--allow-unjudged",  # a rubric task is graded by its tests alone here
                "--out",
                str(out),
                cwd=REPO,
                stderr=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
            )
            _, stderr = await process.communicate()
        elapsed = time.monotonic() - start
        path = out / "trajectories.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        trajectories: list[dict[str, Any]] = [json.loads(line) for line in lines]
    sent = _sent(fake)
    print(f"\n### {agent}: exit {process.returncode}, {elapsed:.0f} s for the job")
    print(f"load average {load_before} at the start, {_load()} at the end\n")
    print("| task | network | reward | stop | turns | token-exact | agent_s |")
    print("| --- | --- | ---: | --- | ---: | --- | ---: |")
    recorded: Counter[Tokens] = Counter()
    by_task = {t["task_id"]: t for t in trajectories}
    for task_dir in task_dirs:
        task = load_task(task_dir)
        network: str = task.config.environment.network_mode or "no-network"
        if task.compose is not None:
            network += " + sidecars"
        if task.id not in by_task:
            print(f"| {task.id} | {network} | (no trajectory) | | | | |")
            continue
        trajectory = by_task[task.id]
        turns = trajectory["turns"]
        mine = Counter((tuple(t["completion_token_ids"]), tuple(t["logprobs"])) for t in turns)
        recorded += mine
        exact = all(sent[k] >= n for k, n in mine.items()) and all(
            t["completion_token_ids"] for t in turns
        )
        reward = trajectory["reward"]["value"]
        error = trajectory.get("error")
        stop = (trajectory.get("outcome") or {}).get("stop_reason")
        agent_s = (trajectory.get("timings") or {}).get("agent_s") or 0.0
        shown = f"{reward}" if error is None else f"error: {str(error)[:60]}"
        print(
            f"| {task.id} | {network} | {shown} | {stop} | {len(turns)} "
            f"| {'yes' if exact else 'NO'} | {agent_s:.1f} |"
        )
    solved = sum(1 for t in trajectories if (t["reward"] or {}).get("value") == 1.0)
    print(
        f"\n{solved}/{len(task_dirs)} tasks at 1.0; {sum(recorded.values())} turns recorded, "
        f"{len(fake.replies)} replies sent, all equal: {recorded == sent}"
    )
    if process.returncode != 0:
        print(stderr.decode()[-2000:])


async def main(agents: list[str], task_dirs: list[Path], concurrency: int) -> None:
    for agent in agents:
        await run_agent(agent, task_dirs, concurrency)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", choices=sorted(AGENT_PLANNERS))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("tasks", nargs="*", type=Path)
    args = parser.parse_args()
    dirs = args.tasks or sorted(p.parent for p in (REPO / "tasks").glob("*/task.toml"))
    asyncio.run(
        main(
            args.agent or ["mini-swe-agent", "codex"], [d.resolve() for d in dirs], args.concurrency
        )
    )
