"""Healthcheck gating: the agent starts only once every service's check has passed.

A check passes once (exit status 0) and the service counts as ready. Docker runs a check every
``interval``; envfarm probes at once and then backs off from 0.25 s to at most one second (never
slower than ``interval``), because here the check gates an episode's start and probing sooner
only makes it start sooner. The verdict keeps Docker's time budget: a service whose check has not
passed within ``start_period + retries * (interval + timeout)`` (the longest Docker would take to
call it unhealthy) fails the start with a ``SandboxStartError`` naming the service and quoting
the last check's output. A service whose container stops meanwhile fails at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict

from envfarm.errors import SandboxStartError

FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 1.0
OUTPUT_CHARS = 800

Probe = Callable[[float], Awaitable[tuple[bool, str]]]
"""Run the check once with a timeout; (passed, its output)."""
Stopped = Callable[[], Awaitable[str | None]]
"""None while the container runs, else why it is not running (exit code and log tail)."""


class HealthPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: float
    timeout_s: float
    retries: int
    start_period_s: float = 0.0

    def budget_s(self) -> float:
        return self.start_period_s + self.retries * (self.interval_s + self.timeout_s)


async def wait_healthy(name: str, policy: HealthPolicy, probe: Probe, stopped: Stopped) -> None:
    """Return once ``probe`` passes; raise SandboxStartError when the budget runs out."""
    budget = policy.budget_s()
    deadline = time.monotonic() + budget
    pause = FIRST_PAUSE_S
    last = "(the check never ran)"
    while True:
        why = await stopped()
        if why is not None:
            raise SandboxStartError(f"service {name!r} stopped before it was healthy: {why}")
        try:
            passed, output = await asyncio.wait_for(probe(policy.timeout_s), policy.timeout_s + 5)
        except TimeoutError:
            passed, output = False, f"the check did not finish within {policy.timeout_s:g} s"
        if passed:
            return
        last = output.strip()[-OUTPUT_CHARS:] or "(no output)"
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxStartError(
                f"service {name!r} was not healthy within {budget:g} s (start_period + retries "
                f"x (interval + timeout)); last healthcheck output: {last}"
            )
        await asyncio.sleep(min(pause, policy.interval_s, left))
        pause = min(pause * 2, MAX_PAUSE_S)
