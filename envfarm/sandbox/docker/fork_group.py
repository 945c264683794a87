"""What the copies of one warm environment share (``fork.py``): their outbound network and the
helper containers that copy their volumes.

A copy's sidecars may reach out (``services.py``) through an outbound network on which
containers cannot reach one another (``networks.py``). The copies of a group share one: made
by the first copy that asks, so a group costs one network create instead of one per copy, and
removed with the last copy once the warm environment is closed. The volume copies asked for
within ``BATCH_S`` of each other (a group's copies ask at once) are made by one helper
container instead of one each.
"""

from __future__ import annotations

import asyncio
import functools

from envfarm.errors import SandboxError
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.networks import create_network, forget_endpoints, remove_network
from envfarm.sandbox.docker.snapshots import copy_volumes

BATCH_S = 0.2
"""How long a volume copy waits for others to be made by the same helper container."""
REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.25


class VolumeCopies:
    """Batches of volume copies, each made by one helper container with ``labels``."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self._pending: list[tuple[list[tuple[str, str]], asyncio.Future[None]]] = []
        self._batching: asyncio.Task[None] | None = None

    async def copy(self, pairs: list[tuple[str, str]]) -> None:
        """Fill each empty volume ``to`` of ``pairs`` with the contents of ``from``."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((pairs, done))
        if self._batching is None:
            self._batching = asyncio.ensure_future(self._copy_batch())
        await done

    async def _copy_batch(self) -> None:
        await asyncio.sleep(BATCH_S)
        batch, self._pending, self._batching = self._pending, [], None
        helper = (await ensure_base_image()).tag
        try:
            await blocking(
                copy_volumes, [p for pairs, _ in batch for p in pairs], helper, self.labels
            )
        except BaseException as exc:
            failed = exc if isinstance(exc, Exception) else SandboxError("the copy was cancelled")
            for _, done in batch:
                if not done.done():
                    done.set_exception(failed)
            if not isinstance(exc, Exception):
                raise
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)


class GroupOutbound:
    """The network ``name`` (with ``labels``), made on first use."""

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels = name, labels
        self._made: asyncio.Task[str] | None = None
        self._users: set[str] = set()
        self._closed = False

    async def network(self, env_id: str) -> str:
        """Its name, once made (``env_id`` uses it until ``release``)."""
        if self._made is None or (self._made.done() and self._made.exception()):
            self._made = asyncio.ensure_future(self._make())
        self._users.add(env_id)
        return await asyncio.shield(self._made)

    async def _make(self) -> str:
        await blocking(functools.partial(create_network, self.name, self.labels, outbound=True))
        return self.name

    async def release(self, env_id: str, containers: list[str]) -> None:
        """A copy is gone: the endpoints its ``containers`` had on the network too (the
        engine can keep one of a removed container when many come and go on a network at
        once), and the network itself with the last copy once closed."""
        self._users.discard(env_id)
        made = self._made
        if made is not None and made.done() and not made.cancelled() and not made.exception():
            await blocking(forget_endpoints, made.result(), containers)
        await self._remove()

    async def close(self) -> None:
        """The warm environment is gone: removed now, or with its last copy."""
        self._closed = True
        await self._remove()

    async def _remove(self) -> None:
        if not self._closed or self._users or self._made is None:
            return
        made, self._made = self._made, None
        await asyncio.wait([made])  # its outcome is read below, never raised here
        if made.cancelled() or made.exception() is not None:
            return
        for attempt in range(REMOVE_ATTEMPTS):  # the engine lets go of the endpoints of the
            try:  # copies' removed containers a little after their removal
                await blocking(remove_network, made.result())
                return
            except SandboxError:
                if attempt + 1 == REMOVE_ATTEMPTS:
                    raise
                await asyncio.sleep(REMOVE_PAUSE_S)
