"""What a forked environment starts from (``fork.py``), as its surroundings see it."""

from __future__ import annotations

import asyncio
from typing import Protocol


class VolumeSeed(Protocol):
    """A warm environment a new one begins as a copy of: its snapshots and volumes once it is
    frozen, and the outbound network its copies share (``fork.py``)."""

    parent_id: str

    async def launched(self) -> None:
        """Return once the warm environment's own start has made its engine calls."""
        ...

    async def frozen(self) -> str | None:
        """None once the warm environment is frozen (stopped: its volumes can be copied);
        else why it was not (the new one starts cold)."""
        ...

    def started_images(self) -> dict[str, str] | None:
        """Once launched: the images its sidecars started from (service -> image), which its
        copies' start from too unless ``frozen_images`` says otherwise; None when it is known
        not to be frozen."""
        ...

    async def frozen_images(self) -> dict[str, str] | None:
        """Once the warm environment is frozen: the images its copies' sidecars start from
        (service -> its snapshot, or the image it started from when it held nothing to keep);
        None when it was not frozen."""
        ...

    async def copy_volumes(self, pairs: list[tuple[str, str]], gate: str | None) -> None:
        """Fill each empty volume ``to`` of ``pairs`` with the contents of ``from``, then open
        the volume ``gate`` (``gates.py``)."""
        ...

    async def outbound_network(self, env_id: str, endpoints: int) -> str:
        """The name of an outbound network the copies share, with room for ``endpoints``
        more (``networks.py``)."""
        ...

    async def release_outbound(self, env_id: str, containers: list[str]) -> None:
        """``env_id``'s containers (these names) are gone from the shared outbound network."""
        ...


class Seeding:
    """A copy's volumes filled from its seed: copies of the seed's volumes into ``volumes``
    (the copy's, named by ``env_id``), made once the seed is stopped (none when it was not
    frozen), then its ``gate`` volume opened."""

    def __init__(self, seed: VolumeSeed, env_id: str, volumes: list[str], gate: str) -> None:
        self.copied = asyncio.ensure_future(self._copy(seed, env_id, volumes, gate))
        self._copying = False

    async def _copy(self, seed: VolumeSeed, env_id: str, volumes: list[str], gate: str) -> None:
        if await seed.frozen() is not None:
            return
        prefix = f"envfarm-{env_id}-"
        pairs = [(f"envfarm-{seed.parent_id}-{v.removeprefix(prefix)}", v) for v in volumes]
        if pairs:
            self._copying = True
            await seed.copy_volumes(pairs, gate)

    async def volumes_filled(self) -> None:
        await asyncio.shield(self.copied)

    async def ended(self) -> None:
        """Once the copy has ended, cancelled while it still waits for the seed (a copy under
        way runs to its end: its helper container has the volumes); what it raised is kept."""
        if not self._copying:
            self.copied.cancel()
        await asyncio.wait([self.copied])
        if not self.copied.cancelled():
            self.copied.exception()  # retrieved: raised by ``check`` or by who awaited it

    def check(self) -> None:
        """Raise what the copy raised, once ended."""
        self.copied.result()
