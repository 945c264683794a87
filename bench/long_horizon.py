"""Per-turn cost over a long session, with and without a context budget (self-summarization).

One agent session of ``--turns`` bash turns against the fake vLLM server over loopback HTTP
(in this process: its prompt rendering and tokenizing count too) and the fake sandbox. Prints
the wall time per turn over the first and the last ``--window`` turns, their ratio (flat is
1.0x), and the token ids kept in memory (compact layout) against what the full output form
materializes. The baseline, measured in the same run, is the same session without a budget,
whose context grows with every turn. Usage: python bench/long_horizon.py [--turns 300]
[--context-budget 4000] [--window 50]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from envfarm.agent.loop import Agent, AgentLimits
from envfarm.agent.tools import ToolContext
from envfarm.models.token_layout import full_prompts
from envfarm.policy import CaptureOptions, OpenAIPolicy, PolicyServer, SamplingParams
from envfarm.policy.base import PolicyClient
from envfarm.testing.fake_sandbox import FakeSandbox
from envfarm.testing.fake_vllm import FakeVLLM


class Timed(PolicyClient):
    """Stamps the end of every model call, so per-turn wall times can be read back."""

    def __init__(self, inner: PolicyClient) -> None:
        self.inner, self.stamps = inner, [time.perf_counter()]

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        result = await self.inner.complete(*args, **kwargs)
        self.stamps.append(time.perf_counter())
        return result


async def session(turns: int, budget: int | None) -> tuple[list[float], int, int, int]:
    fake = FakeVLLM(commands=[f"echo step {i}" for i in range(turns - 1)])
    sandbox = FakeSandbox()
    await sandbox.start()
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        timed = Timed(client)
        agent = Agent(
            timed,
            sandbox,
            limits=AgentLimits(max_turns=turns * 2, context_budget=budget),
            tools=ToolContext(workdir="/app"),
            sampling=SamplingParams(),
        )
        run = await agent.run("Run every step, then submit.")
    assert run.outcome.stop_reason == "submitted"
    per_turn = [b - a for a, b in zip(timed.stamps, timed.stamps[1:], strict=False)]
    kept = sum(
        len(t.prompt_token_ids or t.prompt_suffix_ids or []) + len(t.completion_token_ids or [])
        for t in run.turns
    )
    materialized = sum(len(p or []) for p in full_prompts(run.turns))
    return per_turn, kept, materialized, len(run.segments)


def ms(values: list[float]) -> float:
    return sum(values) / len(values) * 1000


async def main(turns: int, budget: int, window: int) -> None:
    await session(10, None)  # warm up imports and the loop
    rows = []
    for label, value in (("no budget (baseline)", None), (f"budget {budget}", budget)):
        gc.collect()
        per_turn, kept, materialized, segments = await session(turns, value)
        first, last = ms(per_turn[:window]), ms(per_turn[-window:])
        rows.append((label, len(per_turn), segments, first, last, kept, materialized))
    print(f"one session, {turns - 1} bash turns + submit, fake vLLM on loopback, fake sandbox")
    print(
        "| context | model calls | segments | first turns | last turns | last/first "
        "| token ids kept | prompts materialized |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, calls, segments, first, last, kept, materialized in rows:
        print(
            f"| {label} | {calls} | {segments} | {first:.2f} ms | {last:.2f} ms "
            f"| {last / first:.2f}x | {kept:,} | {materialized:,} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--context-budget", type=int, default=4000)
    parser.add_argument("--window", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.context_budget, args.window))
