"""The ``Sandbox`` interface: one environment an agent works in.

Five primitives (start, exec, read_file, write_file, stop); everything else (directory upload,
helpers) is a free function over them in ``sandbox.files``, so every backend stays small.
``stop`` is idempotent and shielded from cancellation: a Ctrl-C during an episode still tears
the environment down.

What grading needs beyond the primitives is an optional capability, ``VerifierPhases``, that a
backend's sandbox may also implement: switching to the verifier phase's network, and a fresh
sandbox for a verifier that must not run where the agent did. Grading decides when and with which
network (``grading/session.py``); the sandbox only carries it out.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from pydantic import BaseModel, ConfigDict

from envfarm.errors import SandboxError
from envfarm.plan.models import EngineFacts, SandboxSpec


class ExecResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    """None when the command was killed on timeout."""
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0


class Sandbox(ABC):
    """One running environment. Use as ``async with sandbox:``."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``command`` with ``bash -c``; on timeout kill its whole process group."""

    @abstractmethod
    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        """Raise FileNotFoundError when ``path`` does not exist, OSError when it cannot be read
        (PermissionError when ``user``, default root, may not read it).

        SandboxError is reserved for the sandbox itself failing (infrastructure)."""

    @abstractmethod
    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        """Create parent directories as needed; OSError when the path cannot be written (as
        ``user``, default root; the file then belongs to that user)."""

    @property
    def default_user(self) -> str | None:
        """Who runs a command that names no user (the image's user); None: root."""
        return None

    @abstractmethod
    async def _teardown(self) -> None: ...

    _stopped: bool = False

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await asyncio.shield(self._teardown())

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class VerifierImage(BaseModel):
    """A verifier's image of its own (Harbor's ``[verifier.environment]``, separate mode): a
    ``Dockerfile`` in the task's ``tests/``, built with ``tests/`` as its context
    (``context``), or the image ``reference`` names; either holds the tests itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    content_hash: str
    context: Path | None = None
    reference: str | None = None
    build_timeout_s: float = 600.0


class VerifierPhases(ABC):
    """The optional capability of a sandbox that grading uses around the verifier."""

    @abstractmethod
    async def enter_verifier_phase(self, *, network: bool) -> None:
        """Give the running sandbox the verifier phase's network access (``network``: public,
        else none; an environment network and its sidecars stay as they are). Called once,
        after the agent and before grading. SandboxError when it cannot be done."""

    async def prepare_fresh_verifier(self, *, network: bool) -> None:
        """Start getting ``fresh_verifier``'s sandbox ready in the background (a hint, called as
        the agent stops; the default does nothing). Nothing runs in it, and nothing of it is
        handed out, before ``fresh_verifier`` has stopped this sandbox's processes."""
        return

    def shared_paths(self) -> list[str]:
        """Mount points (absolute) that ``fresh_verifier``'s sandbox shares with this one, such as
        volumes: what lies there is the same in both and needs no carrying (default: none)."""
        return []

    @abstractmethod
    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        """A fresh, started sandbox of this one's environment, for a verifier that trusts
        nothing the agent touched (docs/grading.md, clean-room grading), with ``network``;
        of ``image`` instead of the environment's where given (a backend that cannot: a
        ``TaskConfigError`` saying so).

        It runs the same image with the same limits and hardening, and shares this sandbox's
        sidecars, network and volumes (a database keeps what the agent did to it), but none of
        its filesystem. This sandbox's own processes are stopped first and it takes no more
        commands; its ``stop()`` still removes everything, the fresh one included. The
        caller stops the fresh one when done. SandboxError when the backend cannot do it."""


@dataclass(frozen=True)
class Swept:
    """A sandbox whose every process but its helper was killed in place, left as a restart
    would leave it once the contents of ``tmpfs`` (mount points) are removed."""

    tmpfs: list[str]


class InPlaceGrading(ABC):
    """The optional capability of a sandbox that can be its own clean room: restarted with
    nothing of the agent's running, or swept of it in place, its files listed and removed by
    envfarm's own helper, not the image's tools (``grading/cleanroom/inplace.py``)."""

    @abstractmethod
    def grades_in_place(self) -> bool:
        """Whether ``restart_clean`` may stand for ``VerifierPhases.fresh_verifier`` here (asked
        once the sandbox has started)."""

    @abstractmethod
    async def end_processes(self, *, since: float) -> Swept | str:
        """Kill every process but the helper's own, without a restart. ``Swept`` when that
        leaves what ``restart_clean`` would once the verifier phase's network is entered
        (``VerifierPhases.enter_verifier_phase``, which may run beside reads of the files:
        nothing of the agent's runs then) and the ``tmpfs`` emptied: nothing of the system but
        the files changed after ``since``, the container's clock, tells them apart. Else why
        only a restart will do (the processes are killed all the same)."""

    @abstractmethod
    async def restart_clean(self, *, network: bool) -> None:
        """Kill every process of the sandbox and start it again on the same file system, with
        ``network`` (as ``enter_verifier_phase``). SandboxError when it cannot be done."""

    @abstractmethod
    async def walk_files(self) -> bytes:
        """The helper's listing of the sandbox's root file system, mounts left out: records
        ``<type> <ctime> <path relative to />``, each ended by a NUL."""

    @abstractmethod
    async def remove_files(self, paths: list[str], *, contents: Sequence[str] = ()) -> None:
        """Have the helper remove each absolute path with everything below it (of each of
        ``contents``, what is below it), never following a symlink or entering a mount.
        SandboxError when an entry could not be removed."""


def in_place_grading(sandbox: Sandbox) -> InPlaceGrading | None:
    """``sandbox`` as ``InPlaceGrading`` when its backend offers it and it can here."""
    if isinstance(sandbox, InPlaceGrading) and sandbox.grades_in_place():
        return sandbox
    return None


class ProcessLogs(ABC):
    """The optional capability of a sandbox that runs processes of its image's own (an
    ``ENTRYPOINT``): their output, kept with the episode's artifacts under ``processes/``."""

    @abstractmethod
    async def process_logs(self) -> dict[str, bytes]:
        """File name -> output; never raises (a log that cannot be read is left out)."""


class ServiceFiles(ABC):
    """The optional capability of an environment with sidecars: a path copied out of one of
    them (Harbor's ``artifacts`` with ``service``)."""

    @abstractmethod
    async def service_archive(self, service: str, path: str, max_bytes: int) -> bytes | None:
        """``path`` of ``service``'s container as the engine archives it (a tar whose top entry
        is the path's last name); None when it does not exist. Reading stops after
        ``max_bytes`` + 1 bytes (a longer result is too large). SandboxError when the service
        is unknown or the engine fails."""


class ProcessReclaim(ABC):
    """The optional capability of a sandbox that can take back what the agent left running,
    and the disk it kept for grading."""

    @abstractmethod
    async def reclaim_processes(self) -> int:
        """When the sandbox is short of processes (an agent that forked until its limit
        refused), kill what the agent's finished commands left running, so that grading can
        start its own; the number killed (0: there was room). Called once, after the agent."""

    @abstractmethod
    async def free_disk_reserve(self) -> None:
        """Give back the disk the sandbox kept beyond its quota for grading, so the tests can be
        written where the agent filled its disk (a no-op without a reserve). Called just before
        the tests are uploaded, in the sandbox the verifier runs in."""


async def reclaim_processes(sandbox: Sandbox) -> int:
    """``ProcessReclaim.reclaim_processes`` where the backend offers it; else 0."""
    return await sandbox.reclaim_processes() if isinstance(sandbox, ProcessReclaim) else 0


async def free_disk_reserve(sandbox: Sandbox) -> None:
    """``ProcessReclaim.free_disk_reserve`` where the backend offers it."""
    if isinstance(sandbox, ProcessReclaim):
        await sandbox.free_disk_reserve()


def verifier_phases(sandbox: Sandbox) -> VerifierPhases:
    """``sandbox`` as ``VerifierPhases``; SandboxError when its backend does not offer it."""
    if isinstance(sandbox, VerifierPhases):
        return sandbox
    raise SandboxError(
        f"{type(sandbox).__name__} cannot change phases or start a clean verifier sandbox; "
        "grade in the agent's with [verifier] environment_mode = \"shared\" and the agent's "
        "network_mode"
    )


class PreparedImage(BaseModel):
    """The image a task's sandboxes start from, built (or found cached) before episodes run."""

    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str | None = None
    build_s: float = 0.0
    cached: bool = False
    warnings: list[str] = []
    build_log: str | None = None
    """The build's output, its tail if long; for an image built earlier, the log kept then."""


class SandboxBackend(ABC):
    """Where sandboxes come from: one implementation per engine (docker, kubernetes, fake)."""

    name: str

    async def facts(self) -> EngineFacts:
        """What the planner needs to know of this engine (its runtimes)."""
        return EngineFacts(backend=self.name)

    @abstractmethod
    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        """Build or find the image of ``spec``'s environment. ImageError / UnknownBaseImage on
        failure."""

    @abstractmethod
    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        """A new, not yet started sandbox for one episode, as ``spec`` (the plan's) says."""

    @abstractmethod
    async def reap(self) -> list[str]:
        """Remove sandboxes that dead runs left behind; return their ids."""

    async def close(self) -> None:
        """Release what the backend holds open (its connections to the engine or cluster)."""
        return
