"""Warm pools: started sandboxes kept ready, so an episode acquires one in milliseconds.

One pool per environment key (the prepared image plus the sandbox spec, which covers the task's
services and the plan's runtime and networks). ``acquire`` hands out a ready sandbox when there is
one, else starts a new one (a cold start, counted); either way a refill is scheduled in the
background so the pool goes back to ``size``. A sandbox is handed out once and never returned:
after its episode it is stopped by its user, so no state leaks from one episode into the next.
``close`` stops everything still waiting in the pool, and a refill that fails is logged in
``errors`` and retried on the next acquire, never raised into an unrelated episode.

On a backend that can fork (``fork.py``), an environment whose plan forks is filled with copies
of one warm parent, kept for the pool's life: a refill is a copy, ready in the time its
services take to start on copied data rather than their whole cold start. ``acquire`` says
which parent a sandbox is a copy of (``Forked.parent_id``; None for a cold one).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from envfarm.errors import EnvfarmError
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.sandbox.fork import Forked, Forking, Forks

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    warm_hits: int = 0
    cold_starts: int = 0
    refills: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class _Pool:
    spec: SandboxSpec
    image: PreparedImage
    ready: asyncio.Queue[Forked] = field(default_factory=asyncio.Queue)
    starting: int = 0


class WarmPools:
    """Keeps ``size`` started sandboxes per environment of ``backend``."""

    def __init__(self, backend: SandboxBackend, *, size: int, run_id: str) -> None:
        self.backend, self.size, self.run_id = backend, size, run_id
        self.forks = Forks(backend, run_id) if isinstance(backend, Forking) else None
        self.stats = PoolStats()
        self._pools: dict[str, _Pool] = {}
        self._refills: set[asyncio.Task[None]] = set()
        self._closed = False

    def warm(self, spec: SandboxSpec, image: PreparedImage) -> None:
        """Start filling the pool of this environment (call once its image is built)."""
        pool = self._pools.setdefault(Forks.key(spec, image), _Pool(spec, image))
        self._schedule_refill(pool)

    def ready(self, spec: SandboxSpec, image: PreparedImage) -> int:
        """How many started sandboxes of this environment are waiting."""
        pool = self._pools.get(Forks.key(spec, image))
        return 0 if pool is None else pool.ready.qsize()

    async def acquire(self, spec: SandboxSpec, image: PreparedImage) -> Forked:
        """A started sandbox of this environment, for one episode (the caller stops it), and
        the warm parent it is a copy of, if any."""
        pool = self._pools.setdefault(Forks.key(spec, image), _Pool(spec, image))
        try:
            got = pool.ready.get_nowait()
            self.stats.warm_hits += 1
        except asyncio.QueueEmpty:
            got = await self._start(pool)
            self.stats.cold_starts += 1
        self._schedule_refill(pool)
        return got

    async def _start(self, pool: _Pool) -> Forked:
        if self.forks is not None and pool.spec.fork:
            forked = await self.forks.acquire(pool.spec, pool.image)
            if isinstance(forked, Forked):
                return forked
        sandbox = self.backend.create(pool.spec, pool.image, run_id=self.run_id)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.stop()
            raise
        return Forked(sandbox, None, None, pool.image.image_id)

    def _schedule_refill(self, pool: _Pool) -> None:
        missing = self.size - pool.ready.qsize() - pool.starting
        for _ in range(max(0, missing) if not self._closed else 0):
            pool.starting += 1
            refill = asyncio.create_task(self._refill(pool))
            self._refills.add(refill)
            refill.add_done_callback(self._refills.discard)

    async def _refill(self, pool: _Pool) -> None:
        try:
            got = await self._start(pool)
        except EnvfarmError as exc:
            self.stats.errors.append(str(exc))
            log.warning("warm pool refill for %s failed: %s", pool.spec.task_id, exc)
            return
        finally:
            pool.starting -= 1
        if self._closed:
            await got.sandbox.stop()
            return
        self.stats.refills += 1
        pool.ready.put_nowait(got)

    async def close(self) -> None:
        self._closed = True
        refills = list(self._refills)
        for refill in refills:
            refill.cancel()
        await asyncio.gather(*refills, return_exceptions=True)
        for pool in self._pools.values():
            while not pool.ready.empty():
                await pool.ready.get_nowait().sandbox.stop()
        if self.forks is not None:
            await self.forks.close()
