"""What surrounds the main container of a Docker environment: the episode's internal network and
volumes, the compose sidecars, and the main container's place among them.

``up`` creates a dedicated internal network (``networks.py``) and the compose file's volumes,
then starts every sidecar in dependency order, each as soon as what it ``depends_on`` is
started or healthy (``healthchecks.py``). The main container is started at once, concurrently
(nothing runs in it before the agent does): its dependencies gate its healthcheck and the
agent, which is what they mean for it. Sidecars join the internal network and, unless the job
turned it off or the compose file keeps the sidecar on ``internal: true`` networks only, the
environment's outbound network (``networks.py``); the main container joins the internal one as
``main`` and, only when the task asks for network access, the default bridge too. ``settle``
gives a main container (the first, and each clean room that takes its place) the task's bind
files and, without network access, no default route (unless its helper drops it itself), so
it sees its sidecars and nothing else; ``drop_default_route`` takes the route away again when
the bridge was left (the verifier phase) or the network namespace is new (a restart).

A copy of a warm environment (``fork.py``, ``seed_from``) starts the same way once the warm
one's start has made its engine calls, its sidecars made early (``sidecar_starts.py``) and
their volumes filled as copies of the warm one's once it is frozen.

Everything carries envfarm's labels with the owner's host and pid (``reaper.py`` removes what a
killed run left behind); ``sweep`` removes what is not a container (the environment removes
those). Docker calls run on the environments' pool (``engine_pool.py``).
"""

from __future__ import annotations

import asyncio
import functools
import time

from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.docker import gates
from envfarm.sandbox.docker import services as sidecars
from envfarm.sandbox.docker.containers import remove_in_background
from envfarm.sandbox.docker.engine_pool import all_or_nothing, blocking, uncancelled
from envfarm.sandbox.docker.healthchecks import main_healthy, sidecar_healthy
from envfarm.sandbox.docker.images.environment_images import build_environment_images
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.networks import create_network, drop_default_route
from envfarm.sandbox.docker.sandbox import DockerSandbox
from envfarm.sandbox.docker.seeds import Seeding, VolumeSeed
from envfarm.sandbox.docker.services import LABEL_ENVIRONMENT, LABEL_SERVICE
from envfarm.sandbox.docker.sidecar_starts import SidecarStarts
from envfarm.settings import ImageSource
from envfarm.spec.compose import MAIN_SERVICE, ComposeService


class Surroundings:
    """The network, volumes and sidecars of one environment (``env_id``) of ``environment``."""

    def __init__(
        self,
        environment: EnvironmentSpec,
        env_id: str,
        *,
        run_id: str,
        network_name: str | None,
        outbound: bool = True,
        service_images: dict[str, str] | None = None,
        sources: list[ImageSource] | None = None,
        seed_from: VolumeSeed | None = None,
    ) -> None:
        self.environment = environment
        self.seed_from = seed_from
        """A warm environment (``fork.py``) this one begins as a copy of."""
        self.env_id, self.run_id = env_id, run_id
        self.network_name = network_name
        """The main container's environment network (None without a compose file)."""
        self.outbound = outbound
        """The sidecars also join an outbound network of their own (``networks.py``)."""
        self.outbound_name: str | None = None
        self.service_images = service_images
        self.sources = sources
        self.network_id: str | None = None
        self.sidecar_ids: dict[str, str] = {}
        self.volumes: list[str] = []
        self.ready_waits: dict[str, float] = {}
        """Service -> how long its healthcheck took to pass once it was started."""
        self.launched = asyncio.Event()
        """Set once ``up`` has started every sidecar (or ended)."""
        self._exited: list[str] | None = None
        """While ``up`` runs: the helper containers it leaves, removed once it is up."""

    def labels(self, kind: str, service: str | None = None) -> dict[str, str]:
        labels = {
            LABEL_MANAGED: "true",
            LABEL_KIND: kind,
            LABEL_RUN: self.run_id,
            LABEL_OWNER: owner_label(),
            LABEL_TASK: self.environment.task_id,
            LABEL_ENVIRONMENT: self.env_id,
        }
        return labels | ({LABEL_SERVICE: service} if service else {})

    async def up(self, main: DockerSandbox) -> None:
        """Start ``main`` and everything around it; return once every healthcheck has passed
        (SandboxStartError naming the service otherwise: the caller removes what exists)."""
        compose = self.environment.compose
        if compose is None:
            await uncancelled(asyncio.ensure_future(main.start()))
            since = time.monotonic()
            await main_healthy(self.environment, main)
            self.ready_waits[MAIN_SERVICE] = time.monotonic() - since
            return
        seeding: Seeding | None = None
        starts: SidecarStarts | None = None
        images: asyncio.Task[bool] | None = None
        started = {name: asyncio.Event() for name in compose.services}
        healthy = {name: asyncio.Event() for name in compose.services}

        async def dependencies(service: ComposeService) -> None:
            for dependency, condition in service.depends_on.items():
                ready = healthy if condition == "service_healthy" else started
                await ready[dependency].wait()

        async def bring_up(service: ComposeService) -> None:
            if service.name == MAIN_SERVICE:
                if seeding is not None and any(m.kind == "volume" for m in service.volumes):
                    await seeding.volumes_filled()
                # Nothing runs in main until the agent starts, so it is created at once; its
                # dependencies gate its healthcheck and the agent, not its creation.
                await uncancelled(asyncio.ensure_future(main.start()))
                await self.settle(main)
                await dependencies(service)
                started[service.name].set()
                since = time.monotonic()
                await main_healthy(self.environment, main)
            else:
                assert starts is not None
                seed_images = self.seed_from.started_images() if self.seed_from else None
                early = await starts.create_early(service, (seed_images or {}).get(service.name))
                await dependencies(service)
                copied = await asyncio.shield(images) if images is not None else False
                image = (self.service_images or {}).get(service.name)
                filled = seeding.volumes_filled if seeding is not None else None
                container_id = await starts.start(
                    service, image, copied=copied, filled=filled, early=early
                )
                started[service.name].set()
                if all(started[name].is_set() for name in compose.sidecars):
                    self.launched.set()
                since = time.monotonic()
                await sidecar_healthy(service, container_id)
            self.ready_waits[service.name] = time.monotonic() - since
            healthy[service.name].set()

        self._exited = []
        try:
            if self.seed_from is not None:  # the seed's own engine calls first
                await self.seed_from.launched()
            else:
                await self._sidecar_images(seeded=False)
            await self._volumes()
            if self.seed_from is not None:  # decided and copied while the rest starts
                gate = gates.gate_volume(self.env_id)
                seeding = Seeding(self.seed_from, self.env_id, self.volumes, gate)
                images = asyncio.ensure_future(self._sidecar_images(seeded=True))
            await self._networks()
            network = self.network_name or ""
            starts = SidecarStarts(
                self.environment,
                self.env_id,
                network,
                self.outbound_name,
                self.labels,
                self.sidecar_ids,
            )
            await all_or_nothing([bring_up(s) for s in compose.services.values()])
        finally:
            self.launched.set()
            exited, self._exited = self._exited, None  # after a failure, the sweep's
            if images is not None:  # what still waits for the seed is not waited for
                images.cancel()
                await asyncio.wait([images])
                if not images.cancelled():
                    images.exception()  # retrieved: a sidecar raised it
            if seeding is not None:
                await seeding.ended()  # its copy ran to its end (``blocking``)
        if seeding is not None:
            seeding.check()  # raised when nothing else failed
        for helper in exited:  # after the start, not queued in the engine before its calls
            remove_in_background(helper)

    async def _volumes(self) -> None:
        assert self.environment.compose is not None
        compose = self.environment.compose
        wanted = {
            volume
            for service in compose.services.values()
            for volume in sidecars.volume_names(self.env_id, compose.volumes, service).values()
        }
        self.volumes = sorted(wanted)
        gate = [gates.gate_volume(self.env_id)] if self.seed_from is not None else []
        labels = self.labels("volume")
        await asyncio.gather(
            *(blocking(sidecars.create_volume, v, labels) for v in [*self.volumes, *gate])
        )

    async def _networks(self) -> None:
        """The internal network and, for sidecars that may reach out, the outbound one."""
        assert self.environment.compose is not None
        name = self.network_name or f"envfarm-{self.env_id}"
        labels = self.labels("network")
        reaching = [s for s in self.environment.compose.sidecars.values() if not s.internal_only]
        if self.outbound and reaching:
            self.network_id, self.outbound_name = await asyncio.gather(
                blocking(create_network, name, labels),
                self._outbound_network(labels, len(reaching)),
            )
        else:
            self.network_id = await blocking(create_network, name, labels)

    async def _outbound_network(self, labels: dict[str, str], endpoints: int) -> str:
        """The environment's own, or a fork group's, which its copies share (``fork.py``)."""
        if self.seed_from is not None:
            return await self.seed_from.outbound_network(self.env_id, endpoints)
        name = f"envfarm-{self.env_id}-out"
        await blocking(functools.partial(create_network, name, labels, outbound=True))
        return name

    async def _sidecar_images(self, *, seeded: bool) -> bool:
        """The sidecars' images: the seed's snapshots once it is frozen (True), else those
        prepared for the task, built when not yet."""
        seed = self.seed_from if seeded else None
        if seed is not None and (snapshots := await seed.frozen_images()) is not None:
            self.service_images = snapshots
            return True
        if self.service_images is None:
            images = await build_environment_images(self.environment, self.sources)
            self.service_images = images.service_image_ids()
        return False

    async def settle(self, main: DockerSandbox) -> None:
        """The task's bind files, and no default route without network access: for the main
        container, and for a fresh one that takes its place (``fresh_verifier``)."""
        if self.environment.compose is None:
            return
        archive = sidecars.files_archive(
            self.environment.environment_dir, self.environment.compose.main.volumes
        )
        if archive is not None:
            await blocking(sidecars.put_files, main.container_id, archive)
        if not main.config.network and not main.drops_own_route:
            await self.drop_default_route(main)

    async def drop_default_route(self, main: DockerSandbox) -> None:
        """Remove the environment network's default route from ``main`` (it leads nowhere,
        but ``no-network`` means no route); gVisor ignores the interfaces."""
        if self.environment.compose is None or main.gvisor:
            return
        helper = (await ensure_base_image()).tag
        labels = self.labels("helper", MAIN_SERVICE)
        exited = self._exited
        drop = functools.partial(drop_default_route, keep=exited is not None)
        helper_id = await blocking(drop, main.container_id, helper, labels)
        if exited is not None:
            exited.append(helper_id)

    async def sweep(self) -> None:
        """Remove the network, the volumes, and anything a cancelled start created
        unrecorded (after the containers)."""
        self.sidecar_ids.clear()
        await blocking(sidecars.sweep, self.env_id)
        self.network_id, self.volumes = None, []
        if self.seed_from is not None and self.environment.compose is not None:
            names = [f"envfarm-{self.env_id}-{s}" for s in self.environment.compose.sidecars]
            await self.seed_from.release_outbound(self.env_id, names)
