"""How an environment's sidecars are created and started (``surroundings.py``).

A cold environment's sidecar is created once what it ``depends_on`` is ready, and started. A
copy's (``fork.py``) is created at once, while its warm environment warms, from the image that
one's started from, with volumes the engine does not fill from the image (``nocopy``); one with
volumes to fill and nothing to wait for is started too, held at a gate (``gates.py``). Once the
warm one is frozen, its volumes are filled as copies of the warm one's, and it is let go (or
started). A sidecar whose image turned out to be a snapshot (its file system held something to
keep, ``snapshots.py``), or whose warm environment was not frozen (it starts cold), is made
again, as is one that did not stay held (an image without ``/bin/sh`` ends at once).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from envfarm.errors import SandboxError, SandboxStartError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.docker import gates
from envfarm.sandbox.docker import services as sidecars
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.mainprocess import image_config
from envfarm.spec.compose import ComposeService

Early = tuple[str, bool]
"""A sidecar created early: the image it was created from, and whether it was started held."""


@dataclass
class SidecarStarts:
    """The sidecars of environment ``env_id``, recorded in ``ids`` (service -> container)."""

    environment: EnvironmentSpec
    env_id: str
    network: str
    outbound: str | None
    labels: Callable[[str, str], dict[str, str]]
    ids: dict[str, str]

    async def create_early(self, service: ComposeService, image: str | None) -> Early | None:
        """A copy's sidecar, created from ``image`` (its warm environment's, None: not made
        early) and started held when it has volumes to fill and nothing to wait for."""
        if image is None:
            return None
        held = None
        if not service.depends_on and any(m.kind == "volume" for m in service.volumes):
            held = gates.held(service, await image_config(image, service.name), self.env_id)
        await self._create(service, image, copied=True, held=held)
        if held is not None:
            try:
                await blocking(sidecars.start_sidecar, self.ids[service.name], service.name)
            except SandboxStartError:  # made again, started as usual
                await self._discard(service)
                return None
        return image, held is not None

    async def start(
        self,
        service: ComposeService,
        image: str | None,
        *,
        copied: bool,
        filled: Callable[[], Awaitable[None]] | None,
        early: Early | None,
    ) -> str:
        """Its container, created (unless ``early`` made it from ``image``) and started (or let
        go) once ``filled`` (its volumes filled, ``copied``: as copies of the seed's)."""
        if image is None:
            raise SandboxError(f"service {service.name!r}: no image was prepared for it")
        if early is not None and (early[0], True) != (image, copied):  # made again
            await self._discard(service)
            early = None
        if early is None:
            await self._create(service, image, copied=copied)
        container_id = self.ids[service.name]
        if filled is not None and any(m.kind == "volume" for m in service.volumes):
            await filled()
        if early is not None and early[1]:
            try:
                await blocking(gates.wake, container_id, service.name)
                return container_id
            except SandboxStartError:  # not held: without a shell, it ended at once
                await self._discard(service)
                await self._create(service, image, copied=copied)
                container_id = self.ids[service.name]
        await blocking(sidecars.start_sidecar, container_id, service.name)
        return container_id

    async def _discard(self, service: ComposeService) -> None:
        """Remove its container, to be made again."""
        await blocking(sidecars.remove_container, self.ids.pop(service.name))

    async def _create(
        self,
        service: ComposeService,
        image: str,
        *,
        copied: bool,
        held: gates.Hold | None = None,
    ) -> None:
        assert self.environment.compose is not None
        names = sidecars.volume_names(self.env_id, self.environment.compose.volumes, service)
        self.ids[service.name] = await blocking(
            functools.partial(
                sidecars.create_sidecar,
                service,
                image=image,
                container_name=f"envfarm-{self.env_id}-{service.name}",
                network=self.network,
                outbound=None if service.internal_only else self.outbound,
                volumes=names,
                labels=self.labels("service", service.name),
                env_dir=self.environment.environment_dir,
                copied=copied,
                held=held,
            )
        )
