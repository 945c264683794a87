"""A task's environment on the Docker engine: the main container plus compose sidecars.

Per episode, ``start`` creates a dedicated internal network (``networks.py``) and the compose
file's volumes, then starts every sidecar in dependency order, each as soon as what it
``depends_on`` is started or healthy. The main container is created at once, concurrently
(nothing runs in it before the agent does): its dependencies gate its healthcheck and the
agent, which is what they mean for it. The main container is a ``DockerSandbox`` (the agent
works in it) that joins the network as ``main`` and, only when the task asks for network
access, the default bridge too; without network access its default route is removed, so it
sees its sidecars and nothing else. When the verifier phase's network access differs from the
agent's, ``enter_verifier_phase`` joins or leaves the bridge (``networks.py``). Sidecars join
the internal network alone. ``start`` returns once every healthcheck has passed (the sidecars'
compose healthchecks and the main container's ``[environment.healthcheck]``), or raises
``SandboxStartError`` naming the service, after removing everything it created
(``healthchecks.py`` says when each container counts as healthy).
``fork_clean`` (a clean-room verifier) kills the main container and starts a fresh one in its
place: same network alias, volumes and bind files, same sidecars. ``service_archive`` copies a
path out of a sidecar through the engine's archive API (a task's ``artifacts`` with
``service``).

Teardown removes the main container, the sidecars (with their anonymous volumes), the network
and the episode's volumes. Everything carries envfarm's labels with the owner's host and pid
(``reaper.py`` removes what a killed run left behind); live environments are also removed at
interpreter exit. Docker calls run on a thread pool of their own (``engine_pool.py``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import uuid
from collections.abc import Coroutine
from typing import Any

from envfarm.errors import SandboxError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.base import ServiceFiles
from envfarm.sandbox.docker import services as sidecars
from envfarm.sandbox.docker.containers import read_path_archive
from envfarm.sandbox.docker.engine_pool import blocking, uncancelled
from envfarm.sandbox.docker.healthchecks import main_healthy, sidecar_healthy
from envfarm.sandbox.docker.images import ensure_base_image
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.networks import create_network, drop_default_route
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.service_images import build_environment_images
from envfarm.sandbox.docker.services import LABEL_ENVIRONMENT, LABEL_SERVICE
from envfarm.settings import ImageSource
from envfarm.spec.compose import MAIN_SERVICE, ComposeService

_live: dict[str, DockerEnvironment] = {}


def _remove_live_environments() -> None:
    for environment in list(_live.values()):
        environment.remove_now()
    _live.clear()


atexit.register(_remove_live_environments)


class DockerEnvironment(DockerSandbox, ServiceFiles):
    """The main container of a task with sidecars and/or a healthcheck."""

    def __init__(
        self,
        config: DockerSandboxConfig,
        environment: EnvironmentSpec,
        *,
        env_id: str | None = None,
        service_images: dict[str, str] | None = None,
        sources: list[ImageSource] | None = None,
    ) -> None:
        self.env_id = env_id or uuid.uuid4().hex[:12]
        super().__init__(sidecars.main_config(environment, config, self.env_id))
        self.environment = environment
        self.service_images = service_images
        self.sources = sources
        self.network_id: str | None = None
        self.sidecar_ids: dict[str, str] = {}
        self.volumes: list[str] = []

    def labels(self, kind: str, service: str | None = None) -> dict[str, str]:
        labels = {
            LABEL_MANAGED: "true",
            LABEL_KIND: kind,
            LABEL_RUN: self.config.run_id,
            LABEL_OWNER: owner_label(),
            LABEL_TASK: self.environment.task_id,
            LABEL_ENVIRONMENT: self.env_id,
        }
        return labels | ({LABEL_SERVICE: service} if service else {})

    async def start(self) -> None:
        _live[self.env_id] = self
        try:
            await self._start_all()
        except BaseException:
            await self.stop()
            raise

    async def _start_all(self) -> None:
        compose = self.environment.compose
        if compose is None:
            await uncancelled(asyncio.ensure_future(super().start()))
            await main_healthy(self.environment, self)
            return
        if self.service_images is None:
            images = await build_environment_images(self.environment, self.sources)
            self.service_images = images.service_image_ids()
        name = self.config.network_name or f"envfarm-{self.env_id}"
        self.network_id = await blocking(create_network, name, self.labels("network"))
        wanted = {
            volume
            for service in compose.services.values()
            for volume in sidecars.volume_names(self.env_id, compose.volumes, service).values()
        }
        self.volumes = sorted(wanted)
        await asyncio.gather(
            *(blocking(sidecars.create_volume, v, self.labels("volume")) for v in self.volumes)
        )
        started = {name: asyncio.Event() for name in compose.services}
        healthy = {name: asyncio.Event() for name in compose.services}

        async def dependencies(service: ComposeService) -> None:
            for dependency, condition in service.depends_on.items():
                ready = healthy if condition == "service_healthy" else started
                await ready[dependency].wait()

        async def bring_up(service: ComposeService) -> None:
            if service.name == MAIN_SERVICE:
                # Nothing runs in main until the agent starts, so it is created at once; its
                # dependencies gate its healthcheck and the agent, not its creation.
                await self._start_main()
                await dependencies(service)
                started[service.name].set()
                await main_healthy(self.environment, self)
            else:
                await dependencies(service)
                container_id = await self._start_sidecar(service)
                started[service.name].set()
                await sidecar_healthy(service, container_id)
            healthy[service.name].set()

        await _all_or_nothing([bring_up(s) for s in compose.services.values()])

    async def _start_main(self) -> None:
        await uncancelled(asyncio.ensure_future(super().start()))
        await self._prepare_fork(self)

    def _creates_fork_ahead(self) -> bool:
        """Not beside sidecars: the fork takes the ``main`` network alias when it starts."""
        return False

    async def _prepare_fork(self, clean: DockerSandbox) -> None:
        """The task's bind files, and no default route without network access: for the main
        container, and for a fresh one that takes its place (``fork_clean``)."""
        if self.environment.compose is None:
            return
        archive = sidecars.files_archive(
            self.environment.environment_dir, self.environment.compose.main.volumes
        )
        if archive is not None:
            await blocking(sidecars.put_files, clean.container_id, archive)
        if not clean.config.network and not clean._gvisor:  # gVisor ignores the interfaces
            helper = (await ensure_base_image()).tag
            labels = self.labels("helper", MAIN_SERVICE)
            await blocking(drop_default_route, clean.container_id, helper, labels)

    async def _restarted(self) -> None:
        """A restarted main container's network namespace is new: its default route is back."""
        if not self.config.network:
            await self._network_taken_away()

    async def _network_taken_away(self) -> None:
        """The verifier phase left the bridge: the environment network's default route is
        back (it leads nowhere, but ``no-network`` means no route)."""
        if self.environment.compose is None or self._gvisor:
            return
        helper = (await ensure_base_image()).tag
        labels = self.labels("helper", MAIN_SERVICE)
        await blocking(drop_default_route, self.container_id, helper, labels)

    async def _start_sidecar(self, service: ComposeService) -> str:
        assert self.environment.compose is not None
        assert self.service_images is not None
        image = self.service_images.get(service.name)
        if image is None:
            raise SandboxError(f"service {service.name!r}: no image was prepared for it")
        names = sidecars.volume_names(self.env_id, self.environment.compose.volumes, service)
        container = await blocking(
            functools.partial(
                sidecars.create_sidecar,
                service,
                image=image,
                container_name=f"envfarm-{self.env_id}-{service.name}",
                network=self.config.network_name or "",
                volumes=names,
                labels=self.labels("service", service.name),
                env_dir=self.environment.environment_dir,
            )
        )
        container_id = str(container.id)
        self.sidecar_ids[service.name] = container_id
        await blocking(sidecars.start_sidecar, container, service.name)
        return container_id

    async def service_archive(self, service: str, path: str, max_bytes: int) -> bytes | None:
        container_id = self.sidecar_ids.get(service)
        if container_id is None:
            known = ", ".join(sorted(self.sidecar_ids)) or "none"
            raise SandboxError(f"no running service {service!r} (started: {known})")
        return await blocking(read_path_archive, container_id, path, max_bytes)

    async def _teardown(self) -> None:
        """The main container and the sidecars at once (each removal is the engine deleting a
        file system), then what they were attached to."""
        errors: list[SandboxError] = []
        ids = list(self.sidecar_ids.values())
        outcomes = await asyncio.gather(
            super()._teardown(),
            *(blocking(sidecars.remove_container, i) for i in ids),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, SandboxError):
                errors.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        self.sidecar_ids.clear()
        try:  # the network, the volumes, and anything a cancelled start created unrecorded
            await blocking(sidecars.sweep, self.env_id)
            self.network_id, self.volumes = None, []
        except SandboxError as exc:
            errors.append(exc)
        _live.pop(self.env_id, None)
        if errors:
            raise errors[0]

    def remove_now(self) -> None:
        """Blocking best-effort removal of everything (interpreter exit)."""
        containers = list(self.sidecar_ids.values())
        with contextlib.suppress(SandboxError):
            containers.insert(0, self.container_id)
        for container_id in containers:
            with contextlib.suppress(SandboxError):
                sidecars.remove_container(container_id)
        with contextlib.suppress(SandboxError):
            sidecars.sweep(self.env_id)


async def _all_or_nothing(coroutines: list[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; on the first failure cancel the rest and raise that failure."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
