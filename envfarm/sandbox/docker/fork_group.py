"""What the copies of one warm environment share (``fork.py``): their outbound network and the
helper containers that copy their volumes.

A copy's sidecars may reach out (``services.py``) through an outbound network on which
containers cannot reach one another (``networks.py``). The copies of a group share one: made
by the first copy that asks, so a group costs one network create instead of one per copy, and
removed with the last copy once the warm environment is closed; a group with more sidecars
than a network of the pool's size has addresses gets as many networks as it needs. The volume
copies asked for within ``BATCH_S`` of each other (a group's copies ask at once) are made by
one helper container instead of one each.
"""

from __future__ import annotations

import asyncio
import functools

from envfarm.errors import SandboxError
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.networks import (
    create_network,
    forget_endpoints,
    remove_network,
    subnet_pool,
)
from envfarm.sandbox.docker.snapshots import VolumeCopy, copy_volumes

BATCH_S = 0.05
"""How long a volume copy waits for others to be made by the same helper container."""
REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.25
STALE_ENDPOINTS = 4


class VolumeCopies:
    """Batches of volume copies, each made by one helper container with ``labels``."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self._pending: list[tuple[VolumeCopy, asyncio.Future[None]]] = []
        self._batching: asyncio.Task[None] | None = None

    async def copy(self, pairs: list[tuple[str, str]], gate: str | None) -> None:
        """Fill each empty volume ``to`` of ``pairs`` with the contents of ``from``, then open
        ``gate`` (``gates.py``)."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append(((pairs, gate), done))
        if self._batching is None:
            self._batching = asyncio.ensure_future(self._copy_batch())
        await done

    async def _copy_batch(self) -> None:
        await asyncio.sleep(BATCH_S)
        batch, self._pending, self._batching = self._pending, [], None
        helper = (await ensure_base_image()).tag
        try:
            await blocking(copy_volumes, [copy for copy, _ in batch], helper, self.labels)
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


class _Shard:
    """One outbound network of a group and the endpoints its copies take on it."""

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name = name
        self.users: dict[str, int] = {}
        self.made = asyncio.ensure_future(self._make(labels))

    async def _make(self, labels: dict[str, str]) -> str:
        await blocking(functools.partial(create_network, self.name, labels, outbound=True))
        return self.name

    def failed(self) -> bool:
        return self.made.done() and (self.made.cancelled() or self.made.exception() is not None)


class GroupOutbound:
    """The networks named ``name``, ``name-1``... (with ``labels``), made on first use: as
    many as a group's endpoints need, each a subnet of the pool's size (``networks.py``)."""

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels = name, labels
        _, prefix = subnet_pool()
        self.capacity = max(1, (1 << (32 - prefix)) - 3 - STALE_ENDPOINTS)
        """Endpoints per network: its addresses but the network's, broadcast and gateway,
        less room for endpoints the engine keeps a little after their container is gone."""
        self._shards: list[_Shard] = []
        self._closed = False

    async def network(self, env_id: str, endpoints: int) -> str:
        """The name of a network with room for ``env_id``'s ``endpoints`` (its sidecars that
        reach out), once made; it is ``env_id``'s until ``release``."""
        self._shards = [s for s in self._shards if s.users or not s.failed()]
        shard = next(
            (
                s
                for s in self._shards
                if not s.failed() and sum(s.users.values()) + endpoints <= self.capacity
            ),
            None,
        )
        if shard is None:
            index = len(self._shards)
            shard = _Shard(self.name if index == 0 else f"{self.name}-{index}", self.labels)
            self._shards.append(shard)
        shard.users[env_id] = endpoints
        return await asyncio.shield(shard.made)

    async def release(self, env_id: str, containers: list[str]) -> None:
        """A copy is gone: the endpoints its ``containers`` had on its network too (the
        engine can keep one of a removed container when many come and go on a network at
        once), and the network itself with its last copy once closed."""
        for shard in self._shards:
            mine = shard.users.pop(env_id, None) is not None
            if mine and shard.made.done() and not shard.failed():
                await blocking(forget_endpoints, shard.made.result(), containers)
        await self._remove()

    async def close(self) -> None:
        """The warm environment is gone: its networks removed now, or with their last copy."""
        self._closed = True
        await self._remove()

    async def _remove(self) -> None:
        if not self._closed:
            return
        idle = [s for s in self._shards if not s.users]
        self._shards = [s for s in self._shards if s.users]
        for shard in idle:
            await asyncio.wait([shard.made])  # its outcome is read below, never raised here
            if shard.failed():
                continue
            for attempt in range(REMOVE_ATTEMPTS):  # the engine lets go of the endpoints of
                try:  # the copies' removed containers a little after their removal
                    await blocking(remove_network, shard.made.result())
                    break
                except SandboxError:
                    if attempt + 1 == REMOVE_ATTEMPTS:
                        raise
                    await asyncio.sleep(REMOVE_PAUSE_S)
