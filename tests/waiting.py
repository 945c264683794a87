"""Waiting in tests for state that has no event to wait on: poll, with a bound that only
guards against a hang (never a timed assertion)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(predicate: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Return once ``predicate()`` is true; AssertionError if it never is."""
    try:
        async with asyncio.timeout(timeout_s):
            while not predicate():  # noqa: ASYNC110 - polls state that has no event to wait on
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"the condition never came true in {timeout_s:g} s") from None
