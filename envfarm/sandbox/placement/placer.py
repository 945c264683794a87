"""Placing one job's episodes over several sandbox backends (clusters or Docker hosts).

Each backend has a quota (how many environments of this controller it may hold at once) and a
set of images it already holds. An episode goes to the healthy backend with the best score:
its free share of quota, plus a bonus when the episode's image is already there (a pull or
build avoided is worth more than balance). Nothing is placed beyond a quota; when every
backend is full, ``place`` answers None and the episode waits in the queue.

A backend can be lost whole (its API unreachable, the cluster gone): ``lose`` marks it out of
service and hands back every episode placed there, started or not. The caller returns them to
the queue as lost attempts (an infrastructure fault, never a reward), so they run again
elsewhere; ``restore`` brings a backend back. ``PlacementQueue`` is that loop: it places
queued episodes, starts each on its backend, releases it when it ends and requeues what a lost
backend held. It is generic over the backend handle so the same code drives ``SandboxBackend``s
and the simulated ones of bench/placement.py; docs/scale.md has the design and its limits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from envfarm.errors import EnvfarmError

LOCALITY_BONUS = 0.5
Handle = TypeVar("Handle")


class BackendLost(EnvfarmError):
    """The backend an episode was placed on is gone; the episode is a lost attempt."""


@dataclass
class Slot(Generic[Handle]):
    name: str
    handle: Handle
    quota: int
    images: set[str] = field(default_factory=set)
    in_use: int = 0
    healthy: bool = True

    @property
    def free(self) -> int:
        return self.quota - self.in_use if self.healthy else 0

    def score(self, image: str) -> float:
        return self.free / self.quota + (LOCALITY_BONUS if image in self.images else 0.0)


class Placer(Generic[Handle]):
    """Which backend each episode runs on; O(backends) per decision."""

    def __init__(self, slots: list[Slot[Handle]]) -> None:
        if not slots:
            raise ValueError("placement needs at least one backend")
        self.slots = {slot.name: slot for slot in slots}
        self.placed: dict[Hashable, str] = {}

    def place(self, episode: Hashable, image: str) -> Slot[Handle] | None:
        best = max(
            (slot for slot in self.slots.values() if slot.free > 0),
            key=lambda slot: (slot.score(image), slot.name),
            default=None,
        )
        if best is not None:
            best.in_use += 1
            self.placed[episode] = best.name
        return best

    def started(self, episode: Hashable, image: str) -> None:
        """The episode's environment runs: its backend now holds the image."""
        name = self.placed.get(episode)
        if name is not None:
            self.slots[name].images.add(image)

    def release(self, episode: Hashable) -> None:
        name = self.placed.pop(episode, None)
        if name is not None:
            self.slots[name].in_use -= 1

    def lose(self, name: str) -> list[Hashable]:
        """Take a backend out of service; the episodes it held, to run again elsewhere."""
        slot = self.slots[name]
        slot.healthy = False
        lost = [episode for episode, where in self.placed.items() if where == name]
        for episode in lost:
            del self.placed[episode]
        slot.in_use = 0
        slot.images.clear()
        return lost

    def restore(self, name: str) -> None:
        self.slots[name].healthy = True

    def free(self) -> int:
        return sum(slot.free for slot in self.slots.values())


@dataclass
class Episode:
    key: Hashable
    image: str
    attempts: int = 0


Start = Callable[[Slot[Handle], Episode], Awaitable[None]]


class PlacementQueue(Generic[Handle]):
    """Queued episodes placed as capacity frees; ``start`` runs one on its backend and raises
    ``BackendLost`` when the backend is gone. ``lose(name)`` requeues what it held."""

    def __init__(self, placer: Placer[Handle], start: Start[Handle]) -> None:
        self.placer = placer
        self._start = start
        self.queue: deque[Episode] = deque()
        self.running: dict[Hashable, tuple[Episode, asyncio.Task[None]]] = {}
        self.lost_attempts = 0
        self.finished = 0
        self._changed = asyncio.Event()

    def submit(self, episodes: list[Episode]) -> None:
        self.queue.extend(episodes)
        self._changed.set()

    def lose(self, name: str) -> list[Hashable]:
        keys = self.placer.lose(name)
        for key in keys:
            episode, task = self.running.pop(key)
            task.cancel()
            self._requeue(episode)
        self._changed.set()
        return keys

    def _requeue(self, episode: Episode) -> None:
        episode.attempts += 1
        self.lost_attempts += 1
        self.queue.appendleft(episode)

    async def _run(self, slot: Slot[Handle], episode: Episode) -> None:
        try:
            await self._start(slot, episode)
        except BackendLost:
            if episode.key in self.running:
                self.running.pop(episode.key)
                self.placer.release(episode.key)
                self._requeue(episode)
        else:
            self.running.pop(episode.key, None)
            self.placer.release(episode.key)
            self.finished += 1
        self._changed.set()

    def pump(self) -> int:
        """Place and start every queued episode that fits now; how many started."""
        started = 0
        while self.queue:
            episode = self.queue[0]
            slot = self.placer.place(episode.key, episode.image)
            if slot is None:
                break
            self.queue.popleft()
            task = asyncio.get_running_loop().create_task(self._run(slot, episode))
            self.running[episode.key] = (episode, task)
            started += 1
        return started

    async def drain(self, done: Callable[[], bool]) -> None:
        """Pump until ``done()``: wakes on every start, end and loss."""
        while not done():
            self.pump()
            self._changed.clear()
            if done():
                return
            await self._changed.wait()
