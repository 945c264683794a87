"""A warm environment forked on the Docker engine: snapshots of a frozen one, restarted.

A ``DockerWarmParent`` starts one environment exactly as a cold episode would (network,
volumes, sidecars healthy, the main container's entrypoint and healthcheck), then freezes it:
each sidecar is stopped with its image's stop signal (a database shuts down cleanly, so a copy
needs no recovery), the main container is killed, and each container's file system is
committed (``snapshots.py``) when it holds something its image does not (a main container in
which nothing of the image's own ran holds nothing). A copy (``fork``) is a new
``DockerEnvironment`` of the same configuration whose containers start from those images and
whose volumes start as reflink copies of the frozen ones: its services start again on copied
data (a database finds its data directory initialized and skips its seeding; ready in about a
second), on its own network, with its own hostnames, container ids and volumes. The method is
recorded as ``snapshot+restart``.

Copies begin while the parent warms, once the parent's own services have started (its engine
calls first): each makes its network, volumes, main container (when nothing of the image's
own runs in it, its image is known before the freeze) and sidecars then, the sidecars from
the images the parent's started from, a database's started held at a gate
(``sidecar_starts.py``, ``gates.py``). Once the parent is stopped, each copy's volumes are
copied and its sidecars let go. A sidecar whose file system holds nothing a copy must keep
(``snapshots.changes_to_keep``: a database keeps its data in its volume) is not committed;
any other is, and its copies' sidecars are made again from the snapshot. What a group's
copies share, one outbound network and one helper container per batch of volume copies, is
in ``fork_group.py``.

A parent whose slowest service was ready too soon after its start is not frozen
(``NotWorthForking``, ``fork_worth.py``): a copy would save less than forking adds. It is
stopped, and the copies begun from it finish as cold starts, as they do when it cannot be
made.

Processes are started again, not restored: nothing of a process's memory (a PRNG's state, a
cache, a session) is shared between copies, and ``/proc/sys/kernel/random/boot_id`` is the
host's for every container anyway. What a copy does share with its siblings is what its files
hold: a database's system identifier, keys or ids the set-up generated and wrote down, the
task's own seeded data. CRIU checkpoint/restore (``docker checkpoint``) would keep running
processes too, but needs the engine's experimental mode and copies process memory (and its
randomness) into every copy; it is not used (bench/RESULTS.md).

The parent's containers, snapshots and volumes carry envfarm's labels with the owner's pid
(``kind=fork`` for the snapshots), so a killed run's are reaped like sandboxes
(``reaper.py``); ``close`` removes them.

A plain single container (no services, no healthcheck) is not forked: its cold start is
already the engine's floor, and a snapshot would copy nothing that took time.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from envfarm.errors import EnvfarmError, SandboxError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.fork_group import GroupOutbound, VolumeCopies
from envfarm.sandbox.docker.fork_worth import worth_forking
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.mainprocess import configured_argv
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.docker.services import LABEL_ENVIRONMENT
from envfarm.sandbox.docker.snapshots import (
    changes_to_keep,
    commit,
    layer_changes,
    remove_image,
    stop_container,
)
from envfarm.sandbox.fork import NotWorthForking, WarmParent
from envfarm.settings import ImageSource
from envfarm.spec.compose import MAIN_SERVICE

METHOD = "snapshot+restart"
SNAPSHOT_REPOSITORY = "envfarm-fork"


class DockerWarmParent(WarmParent):
    method = METHOD

    def __init__(
        self,
        config: DockerSandboxConfig,
        environment: EnvironmentSpec,
        service_images: dict[str, str] | None,
        sources: list[ImageSource] | None,
        *,
        not_worth: dict[str, str] | None = None,
        key: str = "",
    ) -> None:
        """Begins warming at once (``frozen`` says when it is done). ``not_worth``: what
        earlier warm starts showed not worth forking, by environment ``key``: such a parent
        is not started again, and one that shows it is recorded there."""
        self.config, self.environment, self.sources = config, environment, sources
        self._not_worth, self._key = not_worth if not_worth is not None else {}, key
        self.parent = DockerEnvironment(
            config,
            environment,
            env_id=f"w{uuid.uuid4().hex[:11]}",
            service_images=service_images,
            sources=sources,
        )
        self.parent_id = self.parent.env_id
        self.original_images = service_images
        self.snapshot_images: dict[str, str] = {}
        """Service -> the image its copies start from: its snapshot, or its original image when
        its file system held nothing to keep."""
        self.snapshots: list[str] = []
        self._own_process: bool | None = None
        self._volume_copies = VolumeCopies({**self._labels("helper"), LABEL_KIND: "helper"})
        labels = {**self._labels("network"), LABEL_KIND: "network"}
        labels[LABEL_ENVIRONMENT] = f"{self.parent_id}-group"  # not swept with the parent
        self._group_out = GroupOutbound(f"envfarm-{self.parent_id}-group-out", labels)
        loop = asyncio.get_running_loop()
        self._decided: asyncio.Future[str | None] = loop.create_future()
        """Set once frozen (None: stopped, its volumes can be copied) or not (why)."""
        self._committed: asyncio.Future[None] = loop.create_future()
        """Set once every container is committed (its snapshots are the copies' images)."""
        self._warming = asyncio.ensure_future(self._warm())

    async def _warm(self) -> None:
        reason = self._not_worth.get(self._key)
        if reason is not None:
            self.parent.surroundings.launched.set()
            self._decided.set_result(f"{reason} (an earlier warm start)")
            self._committed.set_result(None)
            return
        try:
            if not await self._main_runs_own_process():  # nothing ran in it that a copy
                self.image_id = self.config.image  # should find done: its image is its own
            await self.parent.start()
            worth_forking(self.parent.surroundings.ready_waits)
            await self._stop()
        except NotWorthForking as exc:
            reason = self._not_worth[self._key] = str(exc)
        except EnvfarmError as exc:
            reason = f"the warm environment could not be made: {exc}"
        except BaseException:
            self._decided.cancel()
            self._committed.cancel()
            raise
        finally:
            self.parent.surroundings.launched.set()
        self._decided.set_result(reason)  # its copies copy its stopped volumes from here
        if reason is not None:  # its copies start cold, beside it: not kept meanwhile
            self._committed.set_result(None)
            with contextlib.suppress(SandboxError):
                await self.parent.stop()
            return
        try:
            await self._commit()
        except BaseException as exc:
            self._committed.set_exception(
                exc if isinstance(exc, SandboxError) else SandboxError("the freeze was cancelled")
            )
            if not isinstance(exc, Exception):
                raise
        else:
            self._committed.set_result(None)

    async def frozen(self) -> str | None:
        return await asyncio.shield(self._decided)

    async def launched(self) -> None:
        """Return once the parent's own start has made its engine calls (its services are
        starting): a copy's queue behind them, not before."""
        await self.parent.surroundings.launched.wait()

    async def frozen_images(self) -> dict[str, str] | None:
        """The sidecars' snapshot images once committed; None when it was not frozen.
        SandboxError when a commit failed."""
        if await self.frozen() is not None:
            return None
        await asyncio.shield(self._committed)
        return dict(self.snapshot_images)

    async def _main_runs_own_process(self) -> bool:
        """Whether a process of the image's own runs in the main container (known before it
        starts): then a copy's starts from its snapshot, else from the image it has."""
        if self._own_process is None:
            config = self.parent.config
            own = False
            if config.channel:
                own = await configured_argv(config, config.image) is not None
            self._own_process = own
        return self._own_process

    def _labels(self, service: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "true",
            LABEL_KIND: "fork",
            LABEL_RUN: self.config.run_id,
            LABEL_OWNER: owner_label(),
            LABEL_TASK: self.environment.task_id,
            LABEL_ENVIRONMENT: self.parent_id,
            "io.envfarm.fork.service": service,
        }

    async def _stop(self) -> None:
        """Stop everything, sidecars cleanly, at once: its volumes can be copied from here."""
        sidecars = self.parent.sidecar_ids.values()
        await asyncio.gather(
            self.parent.main.kill_now(), *(blocking(stop_container, i) for i in sidecars)
        )

    async def _commit(self) -> None:
        """Snapshot every container, while copies of its volumes are made."""
        originals = self.parent.surroundings.service_images or {}
        sidecars = self.parent.sidecar_ids
        containers = {name: (i, originals[name]) for name, i in sidecars.items()}
        if await self._main_runs_own_process():
            containers[MAIN_SERVICE] = (self.parent.container_id, self.config.image)

        async def snapshot(service: str, container_id: str, original: str) -> None:
            if service != MAIN_SERVICE and not await self._changed(service, container_id):
                self.snapshot_images[service] = original  # nothing in it for a copy to keep
                return
            repository = f"{SNAPSHOT_REPOSITORY}/{self.parent_id}-{service}"
            labels = self._labels(service)
            image = await blocking(commit, container_id, original, repository, labels)
            self.snapshots.append(image)
            if service == MAIN_SERVICE:
                self.image_id = image
            else:
                self.snapshot_images[service] = image

        await asyncio.gather(*(snapshot(s, c, o) for s, (c, o) in containers.items()))

    async def _changed(self, service: str, container_id: str) -> bool:
        """Whether the sidecar's file system holds something its image does not that a copy
        must keep (``snapshots.changes_to_keep``)."""
        assert self.environment.compose is not None
        mounts = [m.target for m in self.environment.compose.services[service].volumes]
        changes = await blocking(layer_changes, container_id)
        return bool(changes_to_keep(changes, mounts))

    def started_images(self) -> dict[str, str] | None:
        decided = self._decided
        if decided.done() and (decided.cancelled() or decided.result() is not None):
            return None
        return dict(self.parent.surroundings.service_images or {})

    async def fork(self) -> Sandbox:
        image = self.config.image
        if await self._main_runs_own_process() and await self.frozen_images() is not None:
            image = self.image_id or image
        child = DockerEnvironment(
            self.config.model_copy(update={"image": image}),
            self.environment,
            service_images=self.original_images,
            sources=self.sources,
            seed_from=self,
        )
        await child.start()
        return child

    async def copy_volumes(self, pairs: list[tuple[str, str]], gate: str | None) -> None:
        await self._volume_copies.copy(pairs, gate)

    async def outbound_network(self, env_id: str, endpoints: int) -> str:
        return await self._group_out.network(env_id, endpoints)

    async def release_outbound(self, env_id: str, containers: list[str]) -> None:
        await self._group_out.release(env_id, containers)

    async def close(self) -> None:
        errors: list[SandboxError] = []
        if not self._warming.done():
            self._warming.cancel()
        await asyncio.wait([self._warming])
        for made in (self._warming, self._committed):
            if made.done() and not made.cancelled():
                made.exception()  # retrieved: the copies waiting have raised it
        try:
            await self.parent.stop()
        except SandboxError as exc:
            errors.append(exc)
        try:
            await self._group_out.close()
        except SandboxError as exc:
            errors.append(exc)
        for image in self.snapshots:
            with contextlib.suppress(SandboxError):
                await blocking(remove_image, image)
        self.snapshots = []
        if errors:
            raise errors[0]
