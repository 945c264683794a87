"""The engine's CPUs and memory, a task's limits clamped to them, and refusals that will recur.

Tasks are written on bigger machines than the one running them, and Harbor users run them as
they are. Docker refuses a CPU limit above the engine's CPU count, and that refusal comes back
the same way on every attempt; so a task's ``cpus`` and ``memory_mb`` above what the engine has
are clamped to it, with a warning (the task then runs slower, never differently).

A container the engine refuses as configured (HTTP 400: an invalid limit, user or command) will
be refused again: ``start_error`` makes that a ``TaskConfigError``, bad input that is never
retried as an infrastructure fault; anything else stays a retryable ``SandboxStartError``.
"""

from __future__ import annotations

import functools
import os

import docker.errors

from envfarm.errors import SandboxError, SandboxStartError, TaskConfigError
from envfarm.sandbox.docker.client import docker_client

_FALLBACK_MEMORY_MB = 4096


@functools.cache
def engine_capacity() -> tuple[float, int]:
    """(CPUs, memory in MB) of the Docker engine; the host's when the engine cannot say."""
    try:
        info = docker_client().info()
        return float(info["NCPU"]), int(info["MemTotal"]) // (1024 * 1024)
    except (docker.errors.DockerException, SandboxError, KeyError, TypeError, ValueError):
        return float(os.cpu_count() or 1), _host_memory_mb()


def _host_memory_mb() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return _FALLBACK_MEMORY_MB


def clamp_limits(
    cpus: float, memory_mb: int, capacity: tuple[float, int]
) -> tuple[float, int, list[str]]:
    """``cpus`` and ``memory_mb`` no higher than ``capacity``, and a warning for each clamp."""
    host_cpus, host_memory = capacity
    warnings = []
    if cpus > host_cpus:
        warnings.append(
            f"cpus = {cpus:g} is more than the {host_cpus:g} this machine has: the task runs "
            f"with {host_cpus:g}"
        )
        cpus = host_cpus
    if memory_mb > host_memory:
        warnings.append(
            f"memory_mb = {memory_mb} is more than the {host_memory} MB this machine has: the "
            f"task runs with {host_memory} MB"
        )
        memory_mb = host_memory
    return cpus, memory_mb, warnings


def start_error(exc: Exception, message: str) -> SandboxStartError:
    """A start failure: bad input when the engine refused the configuration itself."""
    if isinstance(exc, docker.errors.APIError) and exc.status_code == 400:
        return TaskConfigError(f"{message} (the engine refuses this configuration; it would "
                               "fail the same way again)")  # fmt: skip
    return SandboxStartError(message)
