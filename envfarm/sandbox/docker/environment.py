"""A task's environment on the Docker engine: the main container plus compose sidecars.

``DockerEnvironment`` is the sandbox of a task with a compose file or an
``[environment.healthcheck]``. It holds two parts and says when each acts: ``main``, the
``DockerSandbox`` the agent works in (every command, file and grading capability is the main
container's), and the ``Surroundings`` around it (``surroundings.py``: the internal network,
volumes and sidecars, and the main container's place among them).

``start`` brings everything up and returns once every healthcheck has passed (the sidecars'
compose healthchecks and the main container's ``[environment.healthcheck]``), or raises
``SandboxStartError`` naming the service, after removing everything it created. When the
verifier phase's network access differs from the agent's, ``enter_verifier_phase`` joins or
leaves the bridge (``networks.py``), and a main container without network loses its default
route again, as it does after ``restart_clean`` (its network namespace is new). ``fresh_verifier``
(a clean-room verifier) kills the main container and starts a fresh one in its place, settled
by the surroundings before it is handed out: same network alias, volumes and bind files, same
sidecars. ``service_archive`` copies a path out of a sidecar through the engine's archive API
(a task's ``artifacts`` with ``service``).

Teardown removes the main container and the sidecars at once (each removal is the engine
deleting a file system), then the network and the episode's volumes. Live environments are also
removed at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import uuid
from collections.abc import Sequence

from envfarm.errors import SandboxError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.base import (
    ExecResult,
    InPlaceGrading,
    ProcessLogs,
    ProcessReclaim,
    Sandbox,
    ServiceFiles,
    Swept,
    VerifierImage,
    VerifierPhases,
)
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.channel.relay import ChannelPortForwarding
from envfarm.sandbox.docker.containers import read_path_archive
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.sandbox import DockerSandbox
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.docker.seeds import VolumeSeed
from envfarm.sandbox.docker.services import main_config, remove_container, sweep
from envfarm.sandbox.docker.surroundings import Surroundings
from envfarm.settings import ImageSource

_live: dict[str, DockerEnvironment] = {}


def _remove_live_environments() -> None:
    for environment in list(_live.values()):
        environment.remove_now()
    _live.clear()


atexit.register(_remove_live_environments)


class DockerEnvironment(
    Sandbox,
    VerifierPhases,
    InPlaceGrading,
    ProcessReclaim,
    ProcessLogs,
    ChannelPortForwarding,
    ServiceFiles,
):
    """The main container of a task with sidecars and/or a healthcheck, and its surroundings."""

    def __init__(
        self,
        config: DockerSandboxConfig,
        environment: EnvironmentSpec,
        *,
        env_id: str | None = None,
        service_images: dict[str, str] | None = None,
        sources: list[ImageSource] | None = None,
        seed_from: VolumeSeed | None = None,
    ) -> None:
        """``seed_from``: a frozen environment whose volumes this one's start as copies of
        (``fork.py``)."""
        self.env_id = env_id or uuid.uuid4().hex[:12]
        self.environment = environment
        main = main_config(environment, config, self.env_id)
        self.surroundings = Surroundings(
            environment,
            self.env_id,
            run_id=main.run_id,
            network_name=main.network_name,
            outbound=main.sidecar_network,
            service_images=service_images,
            sources=sources,
            seed_from=seed_from,
        )
        self.main = DockerSandbox(main, settle=self.surroundings.settle)

    @property
    def network_id(self) -> str | None:
        return self.surroundings.network_id

    @property
    def sidecar_ids(self) -> dict[str, str]:
        """Service name -> its container's id."""
        return self.surroundings.sidecar_ids

    @property
    def volumes(self) -> list[str]:
        """The episode's docker volumes."""
        return self.surroundings.volumes

    @property
    def config(self) -> DockerSandboxConfig:
        """The main container's configuration."""
        return self.main.config

    @property
    def container_id(self) -> str:
        return self.main.container_id

    @property
    def channel(self) -> Channel | None:
        return self.main.channel

    @property
    def default_user(self) -> str | None:
        return self.main.default_user

    async def start(self) -> None:
        _live[self.env_id] = self
        try:
            await self.surroundings.up(self.main)
        except BaseException:
            await self.stop()
            raise

    async def enter_verifier_phase(self, *, network: bool) -> None:
        """Join or leave the default bridge; having left it, the environment network's default
        route is back, and goes."""
        if await self.main.switch_network(network) and not network:
            await self.surroundings.drop_default_route(self.main)

    async def restart_clean(self, *, network: bool) -> None:
        """The main container restarted; its network namespace is new, so without network its
        default route is taken away again (by its helper, where it does so itself)."""
        await self.main.restart_clean(network=network)
        if not self.main.config.network and not self.main.drops_own_route:
            await self.surroundings.drop_default_route(self.main)

    async def service_archive(self, service: str, path: str, max_bytes: int) -> bytes | None:
        container_id = self.sidecar_ids.get(service)
        if container_id is None:
            known = ", ".join(sorted(self.sidecar_ids)) or "none"
            raise SandboxError(f"no running service {service!r} (started: {known})")
        return await blocking(read_path_archive, container_id, path, max_bytes)

    # -- the main container's own

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        return await self.main.exec(command, timeout=timeout, workdir=workdir, env=env, user=user)

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        return await self.main.read_file(path, user=user)

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        await self.main.write_file(path, data, mode, user=user)

    async def prepare_fresh_verifier(self, *, network: bool) -> None:
        await self.main.prepare_fresh_verifier(network=network)

    def shared_paths(self) -> list[str]:
        return self.main.shared_paths()

    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        return await self.main.fresh_verifier(network=network, image=image)

    def grades_in_place(self) -> bool:
        return self.main.grades_in_place()

    async def end_processes(self, *, since: float) -> Swept | str:
        return await self.main.end_processes(since=since)

    async def walk_files(self) -> bytes:
        return await self.main.walk_files()

    async def remove_files(self, paths: list[str], *, contents: Sequence[str] = ()) -> None:
        await self.main.remove_files(paths, contents=contents)

    async def reclaim_processes(self) -> int:
        return await self.main.reclaim_processes()

    async def free_disk_reserve(self) -> None:
        await self.main.free_disk_reserve()

    async def process_logs(self) -> dict[str, bytes]:
        return await self.main.process_logs()

    # -- teardown

    async def _teardown(self) -> None:
        """The main container and the sidecars at once (each removal is the engine deleting a
        file system), then what they were attached to."""
        errors: list[SandboxError] = []
        removals = [blocking(remove_container, i) for i in self.sidecar_ids.values()]
        outcomes = await asyncio.gather(self.main.stop(), *removals, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, SandboxError):
                errors.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        try:
            await self.surroundings.sweep()
        except SandboxError as exc:
            errors.append(exc)
        _live.pop(self.env_id, None)
        if errors:
            raise errors[0]

    def remove_now(self) -> None:
        """Blocking best-effort removal of everything, the main container first (interpreter
        exit)."""
        containers = list(self.sidecar_ids.values())
        with contextlib.suppress(SandboxError):
            containers.insert(0, self.main.container_id)
        for container_id in containers:
            with contextlib.suppress(SandboxError):
                remove_container(container_id)
        with contextlib.suppress(SandboxError):
            sweep(self.env_id)
