"""Admission: an episode starts only when the host has the task's CPU and memory to spare.

Memory limits are hard caps that can add up to more than the host has, so memory is admitted
1:1 by default. CPU limits are ceilings and agent sandboxes mostly wait on the model, so CPU is
overcommitted by a factor (4 by default): 2 cores admit eight 1-CPU sandboxes at once. A task
bigger than the whole host is still admitted, alone, rather than never.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def host_memory_mb() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 4096


class Admission:
    def __init__(
        self,
        *,
        cpus: float | None = None,
        memory_mb: int | None = None,
        cpu_overcommit: float = 4.0,
        memory_overcommit: float = 1.0,
        reserved_memory_mb: int = 1024,
    ) -> None:
        self.cpus = (cpus or float(os.cpu_count() or 1)) * cpu_overcommit
        total = memory_mb or max(host_memory_mb() - reserved_memory_mb, 512)
        self.memory_mb = total * memory_overcommit
        self.used_cpus = 0.0
        self.used_memory_mb = 0.0
        self._changed = asyncio.Condition()

    def _fits(self, cpus: float, memory_mb: float) -> bool:
        if self.used_cpus == 0 and self.used_memory_mb == 0:
            return True
        return (
            self.used_cpus + cpus <= self.cpus + 1e-9
            and self.used_memory_mb + memory_mb <= self.memory_mb
        )

    @asynccontextmanager
    async def admit(self, cpus: float, memory_mb: float) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: self._fits(cpus, memory_mb))
            self.used_cpus += cpus
            self.used_memory_mb += memory_mb
        try:
            yield
        finally:
            async with self._changed:
                self.used_cpus -= cpus
                self.used_memory_mb -= memory_mb
                self._changed.notify_all()
