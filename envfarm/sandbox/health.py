"""Healthcheck gating: the agent starts only once every service's check has passed.

A check passes once (exit status 0) and the service counts as ready. Docker runs a check every
``interval``; envfarm probes at once and then backs off from 0.25 s to at most one second (never
slower than ``interval``), because here the check gates an episode's start and probing sooner
only makes it start sooner. The verdict keeps Docker's time budget: a service whose check has not
passed within ``start_period + retries * (interval + timeout)`` (the longest Docker would take to
call it unhealthy) fails the start with a ``SandboxStartError`` naming the service and quoting
the last check's output. A service whose container stops meanwhile fails at once.

Whose fault a failed start is decides whether it is tried again. A service that exits before it
is healthy, and one whose check still fails the same way on its last two runs when the budget
runs out, are the task's (``ServiceFailed``: the episode fails once, with the service's last log
lines, and is not retried): a server that crashes, or never listens, does so on every attempt.
A check that timed out at the end, or whose output still changed, may be a loaded machine: that
start is infrastructure's and retried.
``healthcheck_budget_s`` is that budget for a whole environment, its slowest check's (the
Kubernetes backend waits so long for a pod's readiness probes).

A sidecar's check runs inside its container in a window (``windowed``): one ``docker exec`` of a
shell that repeats the check every 0.1 s for about two seconds and returns at its first pass. A
database that is ready 1.0 s after its start is then seen at 1.1 s, where probes one exec apart
on the backoff above saw it at 1.75 s, and one exec costs the engine more CPU than twenty runs of
``pg_isready``. A container without ``/bin/sh`` is probed one exec at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict

from envfarm.errors import SandboxStartError, ServiceFailed
from envfarm.plan.models import EnvironmentSpec

FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 1.0
OUTPUT_CHARS = 800
WINDOW_S = 2
WINDOW_STEP_S = 0.1

_WINDOW = """read up _ </proc/uptime; end=$(( ${up%.*} + $1 )); shift
while :; do
    out=$("$@" 2>&1); code=$?
    [ "$code" -eq 0 ] && exit 0
    read up _ </proc/uptime; [ "${up%.*}" -ge "$end" ] && break
    sleep STEP 2>/dev/null || sleep 1
done
printf '%s' "$out"; exit "$code"
""".replace("STEP", str(WINDOW_STEP_S))

Probe = Callable[[float], Awaitable[tuple[bool, str]]]
"""Run the check once with a timeout; (passed, its output)."""
Stopped = Callable[[], Awaitable[str | None]]
"""None while the container runs, else why it is not running (exit code and log tail)."""
Logs = Callable[[], Awaitable[str]]
"""The service's last log lines."""


def windowed(argv: list[str], window_s: int = WINDOW_S) -> list[str]:
    """``argv`` run by a shell in the container every WINDOW_STEP_S until it passes or about
    ``window_s`` seconds (whole seconds of the container's uptime) have gone; the shell exits as
    the last run did, with its output."""
    return ["/bin/sh", "-c", _WINDOW, "envfarm-health", str(window_s), *argv]


class HealthPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: float
    timeout_s: float
    retries: int
    start_period_s: float = 0.0

    def budget_s(self) -> float:
        return self.start_period_s + self.retries * (self.interval_s + self.timeout_s)


async def wait_healthy(
    name: str,
    policy: HealthPolicy,
    probe: Probe,
    stopped: Stopped,
    *,
    window_s: float = 0.0,
    logs: Logs | None = None,
) -> None:
    """Return once ``probe`` passes; raise ServiceFailed or SandboxStartError (see above) when
    the budget runs out, ServiceFailed when the service stops.

    ``window_s`` is how long one call of ``probe`` may take by itself repeating the check (0: it
    runs the check once); such a probe paces itself, so the next call follows at once."""
    budget = policy.budget_s()
    deadline = time.monotonic() + budget
    pause = WINDOW_STEP_S if window_s else FIRST_PAUSE_S
    last = "(the check never ran)"
    recent: list[str | None] = []  # the last two failures' output; None: the check timed out
    while True:
        why = await stopped()
        if why is not None:
            raise ServiceFailed(f"service {name!r} stopped before it was healthy: {why}")
        try:
            async with asyncio.timeout(window_s + policy.timeout_s + 5):
                passed, output = await probe(policy.timeout_s)
        except TimeoutError:
            passed, output = False, f"the check did not finish within {policy.timeout_s:g} s"
            recent = [*recent[-1:], None]
        else:
            recent = [*recent[-1:], output.strip()]
        if passed:
            return
        last = output.strip()[-OUTPUT_CHARS:] or "(no output)"
        left = deadline - time.monotonic()
        if left <= 0:
            message = (
                f"service {name!r} was not healthy within {budget:g} s (start_period + retries "
                f"x (interval + timeout)); last healthcheck output: {last}"
            )
            if len(recent) == 2 and recent[0] is not None and recent[0] == recent[1]:
                tail = await logs() if logs is not None else ""
                raise ServiceFailed(
                    f"{message}; it failed the same way twice in a row"
                    + (f"; last log lines:\n{tail}" if tail else "")
                )
            raise SandboxStartError(message)
        await asyncio.sleep(min(pause, policy.interval_s, left))
        if not window_s:
            pause = min(pause * 2, MAX_PAUSE_S)


def healthcheck_budget_s(environment: EnvironmentSpec) -> float:
    """The longest the Docker backend lets an environment's healthchecks take: the slowest
    service's start_period + retries x (interval + timeout), and the main container's (what
    the Kubernetes backend waits for a pod to be ready, on top of its start timeout)."""
    budgets = [0.0]
    checks = (
        [s.healthcheck for s in environment.compose.services.values()]
        if environment.compose
        else []
    )
    for check in checks:
        if check is not None and check.argv() is not None:
            policy = HealthPolicy(
                interval_s=check.interval,
                timeout_s=check.timeout,
                retries=check.retries,
                start_period_s=check.start_period,
            )
            budgets.append(policy.budget_s())
    if (main := environment.config.healthcheck) is not None:
        policy = HealthPolicy(
            interval_s=main.interval_sec,
            timeout_s=main.timeout_sec,
            retries=main.retries,
            start_period_s=main.start_period_sec,
        )
        budgets.append(policy.budget_s())
    return max(budgets)
