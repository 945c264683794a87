"""When each container of a Docker environment counts as healthy (``sandbox/health.py`` gates
on it).

A sidecar's compose healthcheck runs in the sidecar through the engine, in a window of repeated
checks where the container has a shell (``health.windowed``); the sidecar stopping fails it at
once. The main container's check (``[environment.healthcheck]``, else the compose ``main``
service's) runs through the sandbox's own channel, like any command: a dead main container
makes it raise ``SandboxGone``.
"""

from __future__ import annotations

import shlex

from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.docker import services as sidecars
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.health import WINDOW_S, HealthPolicy, wait_healthy
from envfarm.spec.compose import MAIN_SERVICE, ComposeService


async def sidecar_healthy(service: ComposeService, container_id: str) -> None:
    """Return once the sidecar's healthcheck has passed (at once without one)."""
    argv, check = service.health_argv(), service.healthcheck
    if argv is None or check is None:
        return
    policy = HealthPolicy(
        interval_s=check.interval,
        timeout_s=check.timeout,
        retries=check.retries,
        start_period_s=check.start_period,
    )

    shell = [True]

    async def probe(_timeout: float) -> tuple[bool, str]:
        if shell:
            windowed = await blocking(sidecars.probe_windowed, container_id, argv)
            if windowed is not None:
                return windowed
            shell.clear()
        return await blocking(sidecars.probe, container_id, argv)

    async def stopped() -> str | None:
        return await blocking(sidecars.stopped_reason, container_id)

    async def logs() -> str:
        return await blocking(sidecars.log_tail, container_id)

    await wait_healthy(service.name, policy, probe, stopped, window_s=WINDOW_S, logs=logs)


async def main_healthy(environment: EnvironmentSpec, main: Sandbox) -> None:
    """Return once the main container's healthcheck has passed (at once without one)."""
    check = environment.config.healthcheck
    compose_check = environment.compose.main.healthcheck if environment.compose else None
    command: str | None = None
    if check is not None:
        command = check.command
        policy = HealthPolicy(
            interval_s=check.interval_sec,
            timeout_s=check.timeout_sec,
            retries=check.retries,
            start_period_s=check.start_period_sec,
        )
    elif compose_check is not None and (argv := compose_check.argv()) is not None:
        command = shlex.join(argv)
        policy = HealthPolicy(
            interval_s=compose_check.interval,
            timeout_s=compose_check.timeout,
            retries=compose_check.retries,
            start_period_s=compose_check.start_period,
        )
    if command is None:
        return

    async def probe(timeout: float) -> tuple[bool, str]:
        result = await main.exec(command, timeout=timeout)
        return result.exit_code == 0, f"{result.stdout}{result.stderr}"

    async def running() -> str | None:
        return None  # a dead main container makes exec raise SandboxGone

    await wait_healthy(MAIN_SERVICE, policy, probe, running)
