"""The simulation loop's clock moves to the next timer instead of waiting for it."""

from __future__ import annotations

import asyncio

from envfarm.testing.virtual_clock import run


def test_sleeps_cost_simulated_time_in_order() -> None:
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        woke.append((name, asyncio.get_running_loop().time()))

    async def main() -> float:
        await asyncio.gather(sleeper("late", 7200), sleeper("early", 60), sleeper("mid", 600))
        return asyncio.get_running_loop().time()

    end = run(main())
    assert [name for name, _ in woke] == ["early", "mid", "late"]
    assert [at for _, at in woke] == [60, 600, 7200]
    assert end == 7200
