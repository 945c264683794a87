"""A group from one warm environment: prepare one, then hand out independent copies of it.

A GRPO group runs many episodes of one prompt in identical environments. When the environment
is slow to get ready (a database that seeds its data at start, a service that builds an
index), every cold episode pays that again. ``Forking`` is the optional capability of a backend
that can instead start one environment to the moment the agent would start (services healthy,
the image's entrypoint and the task's set-up done), freeze it as a ``WarmParent``, and make
ready copies of it (``WarmParent.fork``), each a sandbox of its own that the episode stops as
any other.

``Forks`` keeps one warm parent per environment key of a job (the prepared image plus the
plan's sandbox spec, as a warm pool's), begun by the first episode that asks and shared by the
rest. Each episode's copy begins at once, while the parent warms: what does not depend on the
frozen parent (a network, the main container) is made meanwhile, the rest once it is frozen.
A parent that cannot be made, or whose start shows that forking would not pay, is not frozen:
the copies begun from it then finish as cold starts, and the reason is logged once per
environment and kept in ``reasons``; an environment the backend cannot fork starts cold from
the beginning. Copies are never returned: each is used by one episode, and grading sees it as
a cold sandbox whose pristine state is the warm one (``Forked.image_id``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from envfarm.errors import EnvfarmError
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox

log = logging.getLogger(__name__)


class NotWorthForking(EnvfarmError):
    """The warm environment was started, but its start showed that a copy would not be ready
    sooner than a cold start; the message says why (its copies finish cold)."""


@dataclass(frozen=True)
class Forked:
    """A started environment begun as a copy of a warm parent, for one episode (the caller
    stops it)."""

    sandbox: Sandbox
    parent_id: str | None
    """The parent it is a copy of; None when the parent was not frozen and the environment
    was started cold instead (``Forks.reasons`` says why)."""
    method: str | None
    """How the copy was made (``WarmParent.method``); None when started cold."""
    image_id: str | None
    """The image of its main container: its pristine state, which grading compares the
    agent's changes against."""


class WarmParent(ABC):
    """One environment prepared to the moment the agent would start, and frozen."""

    parent_id: str
    method: str
    """How copies are made, e.g. ``snapshot+restart``: file systems copied, processes started
    again on the copies."""
    image_id: str | None = None
    """The image a copy's main container starts from, once frozen."""

    @abstractmethod
    async def frozen(self) -> str | None:
        """Wait until the parent is frozen: None; else why it was not (it could not be made,
        or forking would not pay), and its copies finish as cold starts. Raises
        CancelledError when its making was cancelled."""

    @abstractmethod
    async def fork(self) -> Sandbox:
        """A new, started and healthy environment: its own file systems, network, hostnames
        and processes; a copy once the parent is frozen, a cold start when it was not
        (``frozen`` says which). Callable while the parent warms. SandboxError /
        SandboxStartError as a cold start would raise."""

    @abstractmethod
    async def close(self) -> None:
        """Stop warming, remove the parent and its snapshots (copies already handed out are
        not touched)."""


class Forking(ABC):
    """The optional capability of a ``SandboxBackend`` that can fork warm environments."""

    @abstractmethod
    def fork_unsupported(self, spec: SandboxSpec) -> str | None:
        """None when this backend can fork ``spec``'s environment; else why not (one line)."""

    @abstractmethod
    def warm_parent(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> WarmParent:
        """Begin one environment of ``spec``, to be frozen once ready; returns at once (its
        ``frozen`` says how that went)."""


@dataclass
class Forks:
    """Warm parents of a job's environments, each begun once; see the module docstring."""

    backend: Forking
    run_id: str
    reasons: dict[str, str] = field(default_factory=dict)
    """Environment (task id) -> why its episodes start cold."""
    _parents: dict[str, WarmParent | str] = field(default_factory=dict)
    _closed: bool = False

    @staticmethod
    def key(spec: SandboxSpec, image: PreparedImage) -> str:
        """One environment: its prepared image and its sandbox spec (also a warm pool's key)."""
        return f"{image.image_id or image.tag}:{spec.key()}"

    async def acquire(self, spec: SandboxSpec, image: PreparedImage) -> Forked | str:
        """A started environment begun as a copy of the environment's warm parent (started
        cold, ``parent_id`` None, when the parent was not frozen); or why there is none (the
        caller starts a cold sandbox). One that fails to start raises as a cold start would."""
        parent = self._parent(spec, image)
        if isinstance(parent, str):
            return parent
        sandbox = await parent.fork()
        reason = await parent.frozen()  # decided before the copy could finish
        if reason is not None:
            self._cold(spec, reason)
            return Forked(sandbox, None, None, image.image_id)
        return Forked(sandbox, parent.parent_id, parent.method, parent.image_id)

    def _parent(self, spec: SandboxSpec, image: PreparedImage) -> WarmParent | str:
        if self._closed:
            return "the job's warm environments are closed"
        key = self.key(spec, image)
        parent = self._parents.get(key)
        if parent is None:
            reason = self.backend.fork_unsupported(spec)
            if reason is not None:
                self._cold(spec, reason)
                parent = reason
            else:
                try:
                    parent = self.backend.warm_parent(spec, image, run_id=self.run_id)
                except EnvfarmError as exc:
                    parent = f"the warm environment could not be made: {exc}"
                    self._cold(spec, parent)
            self._parents[key] = parent
        return parent

    def _cold(self, spec: SandboxSpec, reason: str) -> None:
        if spec.task_id not in self.reasons:
            self.reasons[spec.task_id] = reason
            log.warning("%s: episodes start cold, not forked: %s", spec.task_id, reason)

    async def close(self) -> None:
        """Remove every warm parent (the copies belong to their episodes)."""
        self._closed = True
        parents, self._parents = list(self._parents.values()), {}
        for parent in parents:
            if isinstance(parent, str):
                continue
            try:
                await parent.close()
            except EnvfarmError as exc:
                log.warning("a warm environment could not be removed: %s", exc)
