"""When forking a Docker environment pays (``fork.py``): never for a plain single container, and
for another only when its warm start shows a service that took long to be ready."""

from __future__ import annotations

from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.fork import NotWorthForking

MIN_SAVED_S = 3.0
"""A copy is made only when the parent's slowest service took at least this long to be ready
once started (what a copy skips): below it, a cold start is as soon (bench/RESULTS.md)."""


def fork_unsupported(spec: SandboxSpec) -> str | None:
    env = spec.environment
    if env.compose is None and env.config.healthcheck is None:
        return (
            "a single container without services or a healthcheck: its cold start is "
            "already as quick as a copy"
        )
    return None


def worth_forking(ready_waits: dict[str, float]) -> None:
    """NotWorthForking when the parent's services were ready so soon after they started
    (``ready_waits``: service -> seconds) that a copy, which skips only that wait, would save
    less than forking adds."""
    waited = max(ready_waits.values(), default=0.0)
    if waited < MIN_SAVED_S:
        slowest = max(ready_waits, key=ready_waits.__getitem__, default="none")
        raise NotWorthForking(
            f"its slowest service ({slowest}) was ready {waited:.1f} s after it started; a "
            f"copy saves only that wait, and forking adds about {MIN_SAVED_S:g} s (the "
            f"freeze, the volume copies, the services' restart on the copies)"
        )
