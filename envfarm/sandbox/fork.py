"""A group from one warm environment: prepare one, then hand out independent copies of it.

A GRPO group runs many episodes of one prompt in identical environments. When the environment
is slow to get ready (a database that seeds its data at start, a service that builds an
index), every cold episode pays that again. ``Forking`` is the optional capability of a backend
that can instead start one environment to the moment the agent would start (services healthy,
the image's entrypoint and the task's set-up done), freeze it as a ``WarmParent``, and make
ready copies of it (``WarmParent.fork``), each a sandbox of its own that the episode stops as
any other.

``Forks`` keeps one warm parent per environment key of a job (the prepared image plus the
plan's sandbox spec, as a warm pool's), made by the first episode that asks and shared by the
rest; a parent that cannot be made, one whose start shows that forking would not pay
(``NotWorthForking``), or an environment the backend cannot fork leaves the episodes to start
cold, and the reason is logged once per environment and kept in ``reasons``.
Copies are never returned: each is used by one episode, and grading sees it as a cold
sandbox whose pristine state is the warm one (``Forked.image_id``).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from envfarm.errors import EnvfarmError
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox

log = logging.getLogger(__name__)


class NotWorthForking(EnvfarmError):
    """The warm environment was started, but its start showed that a copy would not be ready
    sooner than a cold start; the message says why (the episodes start cold). ``started`` is
    that environment, not frozen: started exactly as a cold one, so it serves one episode as
    its cold sandbox (``Forks.take_started``)."""

    def __init__(self, message: str, started: Sandbox | None = None) -> None:
        super().__init__(message)
        self.started = started


@dataclass(frozen=True)
class Forked:
    """A started copy of a warm parent, for one episode (the caller stops it)."""

    sandbox: Sandbox
    parent_id: str
    method: str
    """How the copy was made (``WarmParent.method``)."""
    image_id: str | None
    """The image of the copy's main container: its pristine state, which grading compares
    the agent's changes against."""


class WarmParent(ABC):
    """One environment prepared to the moment the agent would start, and frozen."""

    parent_id: str
    method: str
    """How copies are made, e.g. ``snapshot+restart``: file systems copied, processes started
    again on the copies."""
    image_id: str | None = None
    """The image a copy's main container starts from."""

    @abstractmethod
    async def fork(self) -> Sandbox:
        """A new, started and healthy copy: its own file systems, network, hostnames and
        processes. SandboxError / SandboxStartError as a cold start would raise."""

    @abstractmethod
    async def close(self) -> None:
        """Remove the parent and its snapshots (copies already handed out are not touched)."""


class Forking(ABC):
    """The optional capability of a ``SandboxBackend`` that can fork warm environments."""

    @abstractmethod
    def fork_unsupported(self, spec: SandboxSpec) -> str | None:
        """None when this backend can fork ``spec``'s environment; else why not (one line)."""

    @abstractmethod
    async def warm_parent(
        self, spec: SandboxSpec, image: PreparedImage, *, run_id: str
    ) -> WarmParent:
        """Start one environment of ``spec``, wait until it is ready, and freeze it.
        SandboxError (or SandboxStartError) when it cannot be done."""


@dataclass
class _Entry:
    ready: asyncio.Future[WarmParent | str]
    making: asyncio.Task[None] | None = None
    started: Sandbox | None = None
    """The environment started to decide, not worth forking: for the first episode to ask."""


@dataclass
class Forks:
    """Warm parents of a job's environments, each made once; see the module docstring."""

    backend: Forking
    run_id: str
    reasons: dict[str, str] = field(default_factory=dict)
    """Environment (task id) -> why its episodes start cold."""
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _closed: bool = False

    @staticmethod
    def key(spec: SandboxSpec, image: PreparedImage) -> str:
        return f"{image.image_id or image.tag}:{spec.key()}"

    async def acquire(self, spec: SandboxSpec, image: PreparedImage) -> Forked | str:
        """A started copy of the environment's warm parent; or why there is none (the caller
        starts a cold sandbox). A copy that fails to start raises as a cold start would."""
        parent = await self._parent(spec, image)
        if isinstance(parent, str):
            return parent
        sandbox = await parent.fork()
        return Forked(sandbox, parent.parent_id, parent.method, parent.image_id)

    def take_started(self, spec: SandboxSpec, image: PreparedImage) -> Sandbox | None:
        """After ``acquire`` said why not: the started, unfrozen environment of a parent not
        worth forking, for one episode to use as its cold sandbox (it stops it); else None."""
        entry = self._entries.get(self.key(spec, image))
        if entry is None:
            return None
        started, entry.started = entry.started, None
        return started

    async def _parent(self, spec: SandboxSpec, image: PreparedImage) -> WarmParent | str:
        key = self.key(spec, image)
        async with self._lock:
            if self._closed:
                return "the job's warm environments are closed"
            entry = self._entries.get(key)
            if entry is None:
                entry = _Entry(asyncio.get_running_loop().create_future())
                self._entries[key] = entry
                entry.making = asyncio.ensure_future(self._make(entry, spec, image))
        return await asyncio.shield(entry.ready)

    async def _make(self, entry: _Entry, spec: SandboxSpec, image: PreparedImage) -> None:
        reason = self.backend.fork_unsupported(spec)
        outcome: WarmParent | str
        if reason is not None:
            outcome = reason
        else:
            try:
                outcome = await self.backend.warm_parent(spec, image, run_id=self.run_id)
            except NotWorthForking as exc:
                outcome, entry.started = str(exc), exc.started
            except EnvfarmError as exc:
                outcome = f"the warm environment could not be made: {exc}"
            except BaseException as exc:
                entry.ready.set_exception(exc)
                entry.ready.exception()  # retrieved: the episodes waiting raise it
                raise
        if isinstance(outcome, str):
            self.reasons[spec.task_id] = outcome
            log.warning("%s: episodes start cold, not forked: %s", spec.task_id, outcome)
        entry.ready.set_result(outcome)

    async def close(self) -> None:
        """Remove every warm parent (the copies belong to their episodes)."""
        async with self._lock:
            self._closed = True
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            try:
                outcome = await entry.ready
            except BaseException:  # its episodes have reported it
                continue
            if entry.started is not None:  # no episode took it
                started, entry.started = entry.started, None
                try:
                    await started.stop()
                except EnvfarmError as exc:
                    log.warning("an unused environment could not be removed: %s", exc)
            if not isinstance(outcome, str):
                try:
                    await outcome.close()
                except EnvfarmError as exc:
                    log.warning("a warm environment could not be removed: %s", exc)
