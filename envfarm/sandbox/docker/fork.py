"""A warm environment forked on the Docker engine: snapshots of a frozen one, restarted.

``DockerWarmParent.make`` starts one environment exactly as a cold episode would (network,
volumes, sidecars healthy, the main container's entrypoint and healthcheck), then freezes it:
each sidecar is stopped with its image's stop signal (a database shuts down cleanly, so a copy
needs no recovery), the main container is killed, and every container's file system is
committed (``snapshots.py``; a main container in which nothing of the image's own ran is
not: its image already is what it holds). A copy (``fork``) is a new ``DockerEnvironment`` of
the same configuration whose containers start from those snapshots and whose volumes start as
reflink copies of the frozen ones: its services start again on copied data (a database finds
its data directory initialized and skips its seeding; ready in about a second), on its own
network, with its own hostnames, container ids and volumes. The method is recorded as
``snapshot+restart``. The volume copies of copies asked for together (a group's) are made by
one helper container, and the group's sidecars share one outbound network, made by the first
copy that asks (``outbound_network``; containers on it cannot reach one another), removed with
the last copy once the parent is closed.

A parent whose slowest service was ready within ``MIN_SAVED_S`` of its start is not frozen:
a copy would save less than forking adds, so ``make`` raises ``NotWorthForking`` with the
started environment, which serves one episode as its cold sandbox (``sandbox/fork.py``).

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
import functools
import uuid

from envfarm.errors import SandboxError
from envfarm.plan.models import EnvironmentSpec, SandboxSpec
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.docker.engine_pool import blocking
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.networks import create_network, forget_endpoints, remove_network
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.docker.services import LABEL_ENVIRONMENT
from envfarm.sandbox.docker.snapshots import commit, copy_volumes, remove_image, stop_container
from envfarm.sandbox.fork import NotWorthForking, WarmParent
from envfarm.settings import ImageSource
from envfarm.spec.compose import MAIN_SERVICE

METHOD = "snapshot+restart"
BATCH_S = 0.2
"""How long a volume copy waits for others to be made by the same helper container."""
SNAPSHOT_REPOSITORY = "envfarm-fork"
MIN_SAVED_S = 3.0
"""A copy is made only when the parent's slowest service took at least this long to be ready
once started (what a copy skips): below it, a cold start is as soon (bench/RESULTS.md)."""
REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.25


def fork_unsupported(spec: SandboxSpec) -> str | None:
    env = spec.environment
    if env.compose is None and env.config.healthcheck is None:
        return (
            "a single container without services or a healthcheck: its cold start is "
            "already as quick as a copy"
        )
    return None


class DockerWarmParent(WarmParent):
    method = METHOD

    def __init__(
        self,
        config: DockerSandboxConfig,
        environment: EnvironmentSpec,
        parent: DockerEnvironment,
        sources: list[ImageSource] | None,
    ) -> None:
        self.config, self.environment, self.parent = config, environment, parent
        self.parent_id = parent.env_id
        self.sources = sources
        self.service_images: dict[str, str] = {}
        self.snapshots: list[str] = []
        self._pending: list[tuple[list[tuple[str, str]], asyncio.Future[None]]] = []
        self._batching: asyncio.Task[None] | None = None
        self._outbound: asyncio.Task[str] | None = None
        self._outbound_users: set[str] = set()
        self._closed = False

    @classmethod
    async def make(
        cls,
        config: DockerSandboxConfig,
        environment: EnvironmentSpec,
        service_images: dict[str, str] | None,
        sources: list[ImageSource] | None,
    ) -> DockerWarmParent:
        parent = DockerEnvironment(
            config,
            environment,
            env_id=f"w{uuid.uuid4().hex[:11]}",
            service_images=service_images,
            sources=sources,
        )
        made = cls(config, environment, parent, sources)
        try:
            await parent.start()
            made._worth_forking()
            await made._freeze()
        except NotWorthForking as exc:  # not frozen: an episode's cold sandbox as it stands
            exc.started = parent
            raise
        except BaseException:
            await made.close()
            raise
        return made

    def _worth_forking(self) -> None:
        """NotWorthForking when the parent's services were ready so soon after they started
        that a copy, which skips only that wait, would save less than forking adds."""
        waits = self.parent.surroundings.ready_waits
        waited = max(waits.values(), default=0.0)
        if waited < MIN_SAVED_S:
            slowest = max(waits, key=waits.__getitem__, default="none")
            raise NotWorthForking(
                f"its slowest service ({slowest}) was ready {waited:.1f} s after it started; a "
                f"copy saves only that wait, and forking adds about {MIN_SAVED_S:g} s (the "
                f"freeze, the volume copies, the services' restart on the copies)"
            )

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

    async def _freeze(self) -> None:
        """Stop everything (sidecars cleanly, at once), then snapshot every container."""
        sidecars = dict(self.parent.sidecar_ids)
        await asyncio.gather(
            self.parent.main.kill_now(), *(blocking(stop_container, i) for i in sidecars.values())
        )
        originals = self.parent.surroundings.service_images or {}
        containers = {name: (i, originals[name]) for name, i in sidecars.items()}
        if self.parent.main.runs_own_process:
            containers[MAIN_SERVICE] = (self.parent.container_id, self.config.image)
        else:  # nothing ran in it that a copy should find done: its image is the snapshot
            self.image_id = self.config.image

        async def snapshot(service: str, container_id: str, original: str) -> None:
            repository = f"{SNAPSHOT_REPOSITORY}/{self.parent_id}-{service}"
            labels = self._labels(service)
            image = await blocking(commit, container_id, original, repository, labels)
            self.snapshots.append(image)
            if service == MAIN_SERVICE:
                self.image_id = image
            else:
                self.service_images[service] = image

        await asyncio.gather(*(snapshot(s, c, o) for s, (c, o) in containers.items()))

    async def fork(self) -> Sandbox:
        if self.image_id is None:
            raise SandboxError("the warm environment was not frozen")
        child = DockerEnvironment(
            self.config.model_copy(update={"image": self.image_id}),
            self.environment,
            service_images=self.service_images,
            sources=self.sources,
            seed_from=self,
        )
        await child.start()
        return child

    async def copy_volumes(self, pairs: list[tuple[str, str]]) -> None:
        """The copies asked for within ``BATCH_S`` of each other made by one helper container
        (copies of a group are asked for at once: one container instead of one each)."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((pairs, done))
        if self._batching is None:
            self._batching = asyncio.ensure_future(self._copy_batch())
        await done

    async def _copy_batch(self) -> None:
        await asyncio.sleep(BATCH_S)
        batch, self._pending, self._batching = self._pending, [], None
        helper = (await ensure_base_image()).tag
        labels = {**self._labels("helper"), LABEL_KIND: "helper"}
        try:
            await blocking(copy_volumes, [p for pairs, _ in batch for p in pairs], helper, labels)
        except BaseException as exc:
            failed = exc if isinstance(exc, Exception) else SandboxError("the copy was cancelled")
            for _, done in batch:
                if not done.done():
                    done.set_exception(failed)
            if not isinstance(exc, Exception):
                raise
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)

    async def outbound_network(self, env_id: str) -> str:
        """The group's outbound network, made by the first copy that asks (``Surroundings``):
        one network create for the group instead of one per copy."""
        if self._outbound is None or (self._outbound.done() and self._outbound.exception()):
            self._outbound = asyncio.ensure_future(self._make_outbound())
        self._outbound_users.add(env_id)
        return await asyncio.shield(self._outbound)

    async def _make_outbound(self) -> str:
        name = f"envfarm-{self.parent_id}-group-out"
        labels = {**self._labels("network"), LABEL_KIND: "network"}
        labels[LABEL_ENVIRONMENT] = f"{self.parent_id}-group"  # not swept with the parent
        await blocking(functools.partial(create_network, name, labels, outbound=True))
        return name

    async def release_outbound(self, env_id: str, containers: list[str]) -> None:
        """A copy is gone: the endpoints its ``containers`` had on the group's outbound
        network too (the engine can keep one of a removed container when many come and go on
        a network at once), and the network itself with the last copy once the parent is
        closed."""
        self._outbound_users.discard(env_id)
        made = self._outbound
        if made is not None and made.done() and not made.cancelled() and not made.exception():
            await blocking(forget_endpoints, made.result(), containers)
        await self._remove_outbound()

    async def _remove_outbound(self) -> None:
        if not self._closed or self._outbound_users or self._outbound is None:
            return
        made, self._outbound = self._outbound, None
        await asyncio.wait([made])  # its outcome is read below, never raised here
        if made.cancelled() or made.exception() is not None:
            return
        for attempt in range(REMOVE_ATTEMPTS):  # the engine lets go of the endpoints of the
            try:  # copies' removed containers a little after their removal
                await blocking(remove_network, made.result())
                return
            except SandboxError:
                if attempt + 1 == REMOVE_ATTEMPTS:
                    raise
                await asyncio.sleep(REMOVE_PAUSE_S)

    async def close(self) -> None:
        errors: list[SandboxError] = []
        self._closed = True
        try:
            await self.parent.stop()
        except SandboxError as exc:
            errors.append(exc)
        try:
            await self._remove_outbound()
        except SandboxError as exc:
            errors.append(exc)
        for image in self.snapshots:
            with contextlib.suppress(SandboxError):
                await blocking(remove_image, image)
        self.snapshots = []
        if errors:
            raise errors[0]
