"""The fresh containers a Docker sandbox hands out as clean rooms
(``VerifierPhases.fresh_verifier``).

A clean room is a new container of the agent's configuration (image, limits, aliases, volumes)
with the verifier's network, for a verifier that trusts nothing the agent touched. Starting one
costs a container creation and start, so it is got ready while the agent's container is still
in use: created (not started) as soon as the agent's has started when the plan asks for a
clean room (``DockerSandboxConfig.clean_room_network``), and started by ``prepare`` as the
agent stops; nothing runs in it but the helper until ``hand_out`` has killed the agent's
container. A clean room of a compose environment is settled into it (the task's bind files, no
default route without network: ``environment.py``) before it is handed out, and is never
created ahead: it takes the ``main`` network alias as it starts.

Every clean room is removed with the sandbox that made it (``drain`` hands them over): each
removal is the engine deleting a file system (about a second here), and nothing orders them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from envfarm.errors import SandboxError
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig


class CleanRoom(Protocol):
    """What a clean room is to ``CleanRooms`` (a ``DockerSandbox``)."""

    @property
    def config(self) -> DockerSandboxConfig: ...

    async def create(self) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


Room = TypeVar("Room", bound=CleanRoom)


class CleanRooms(Generic[Room]):
    """The clean rooms of one sandbox: ``make`` builds one from a configuration, ``settle``
    (when given) fits each into its environment once started."""

    def __init__(
        self,
        make: Callable[[DockerSandboxConfig], Room],
        settle: Callable[[Room], Awaitable[None]] | None = None,
    ) -> None:
        self.made: list[Room] = []
        """Every clean room made, in order, until ``drain``."""
        self._make = make
        self._settle = settle
        self._next: tuple[bool, asyncio.Future[Room]] | None = None
        self._created: asyncio.Future[Room] | None = None

    def create_ahead(self, config: DockerSandboxConfig, network: bool) -> None:
        """Create (not start) a clean room with ``network`` in the background; not one to be
        settled into an environment."""
        if self._settle is None:
            self._created = asyncio.ensure_future(self._create(config, network))

    def prepare(self, config: DockerSandboxConfig, network: bool) -> None:
        """Start a clean room with ``network`` in the background (once)."""
        if self._next is None:
            self._next = (network, asyncio.ensure_future(self._start(config, network)))

    async def hand_out(
        self, config: DockerSandboxConfig, network: bool, kill: Callable[[], Awaitable[None]]
    ) -> Room:
        """``kill`` the agent's container, then a started clean room with ``network``: the one
        ``prepare`` started (finishing its start during the kill), or one started now."""
        pending, self._next = self._next, None
        if pending is not None and pending[0] != network:  # not the one asked for: removed later
            await asyncio.gather(pending[1], return_exceptions=True)
            pending = None
        if pending is None:
            await kill()
            return await self._start(config, network)
        killed = asyncio.ensure_future(kill())
        # the prepared container finishes starting while the agent's is killed; handed out after
        kill_outcome, room = await asyncio.gather(killed, pending[1], return_exceptions=True)
        for outcome in (kill_outcome, room):
            if isinstance(outcome, BaseException):
                raise outcome
        assert not isinstance(room, BaseException)
        return room

    async def drain(self) -> list[Room]:
        """Wait for what is being created or started, then hand over every clean room made
        (for removal)."""
        pending, self._next = self._next, None
        created, self._created = self._created, None
        waits = [f for f in (pending and pending[1], created) if f is not None]
        await asyncio.gather(*waits, return_exceptions=True)
        made, self.made = self.made, []
        return made

    async def _create(self, config: DockerSandboxConfig, network: bool) -> Room:
        update = {"network": network, "verifier_network": None, "clean_room_network": None}
        room = self._make(config.model_copy(update=update))
        self.made.append(room)
        await room.create()
        return room

    async def _start(self, config: DockerSandboxConfig, network: bool) -> Room:
        created, self._created = self._created, None
        room: Room | None = None
        if created is not None:
            with contextlib.suppress(SandboxError):  # not created: one is created now
                room = await created
        # one made for another network or image is not this one: removed later
        if room is None or (room.config.network, room.config.image) != (network, config.image):
            room = await self._create(config, network)
        await room.start()
        if self._settle is not None:
            await self._settle(room)
        return room
