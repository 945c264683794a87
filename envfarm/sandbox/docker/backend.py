"""The local Docker engine as a ``SandboxBackend``: task images built here, one container each,
plus sidecars on an internal network for a task with a compose file (``environment.py``).

``prepare`` builds every image of the environment (the main one and each sidecar's) before any
episode is admitted; the sidecars' image ids are remembered per task content hash, so ``create``
hands them to each episode's environment without another lookup. The build's output goes with
the prepared image (``buildlog.py``), for each episode's artifacts. The runtime and the
networks come decided in the plan's ``SandboxSpec`` (``envfarm.plan``); ``facts`` tells the
planner which runtimes the engine has (``runtimes.py``). A task's CPUs and memory above the
engine's are clamped to them, with a warning on the prepared image (``limits.py``).

The prepared image's ``build_s`` is the wall time ``prepare`` waited for the environment's
images: the main image and the sidecars' are built at once, so their build times overlap and are
not added up, and waiting for a shared base another task is building counts, once.
"""

from __future__ import annotations

import asyncio
import time

from envfarm.plan.models import EngineFacts, RuntimeInfo, SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.fork import DockerWarmParent
from envfarm.sandbox.docker.fork_worth import fork_unsupported
from envfarm.sandbox.docker.images.agent_layer import build_agent_image
from envfarm.sandbox.docker.images.buildlog import BuildLog
from envfarm.sandbox.docker.images.environment_images import build_environment_images
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.images.workstation_layer import build_workstation_image
from envfarm.sandbox.docker.limits import clamp_limits, engine_capacity
from envfarm.sandbox.docker.reaper import reap_orphans
from envfarm.sandbox.docker.runtimes import gvisor_runtime, registered_runtimes
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.fork import Forking, Forks, WarmParent
from envfarm.sandbox.images.agent_layer import AgentImages, AgentLayer
from envfarm.sandbox.images.workstation import WorkstationImages
from envfarm.settings import ImageSource, current


class DockerBackend(SandboxBackend, AgentImages, WorkstationImages, Forking):
    name = "docker"

    def __init__(self, image_sources: list[ImageSource] | None = None) -> None:
        self.image_sources = current().sources() if image_sources is None else image_sources
        """Where base images come from, in order (``Settings.sources``)."""
        self._service_images: dict[tuple[str, str], dict[str, str]] = {}
        self._facts: EngineFacts | None = None
        self._not_worth_forking: dict[str, str] = {}
        """Environment key -> why a warm start showed that forking it does not pay: the
        next job's copies of it start cold at once, with no warm start to decide."""

    async def facts(self) -> EngineFacts:
        if self._facts is None:
            registered = await asyncio.to_thread(registered_runtimes)
            runtimes = {
                name: RuntimeInfo(gvisor=r.gvisor, networked=r.networked)
                for name, r in registered.items()
            }
            self._facts = EngineFacts(
                backend="Docker engine",
                runtimes=runtimes,
                gvisor_runtime=gvisor_runtime(),
                fork_unsupported=None,
            )
        return self._facts

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        log = BuildLog()
        start = time.monotonic()
        env = spec.environment
        images = await build_environment_images(env, self.image_sources, on_log=log)
        if env.compose is not None:
            self._service_images[(str(env.root), env.task_hash)] = images.service_image_ids()
            if not (spec.agent_network and spec.verifier_network):
                await ensure_base_image()  # its perl removes the main container's route
        waited = round(time.monotonic() - start, 3)
        prepared = images.prepared().model_copy(update={"build_s": waited})
        built = not prepared.cached
        build_log = await asyncio.to_thread(log.settle, prepared.image_id, built)
        limits = env.config
        capacity = await asyncio.to_thread(engine_capacity)
        *_, clamped = clamp_limits(limits.cpus, limits.memory_mb, capacity)
        warnings = [*prepared.warnings, *clamped]
        return prepared.model_copy(update={"build_log": build_log, "warnings": warnings})

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        env = spec.environment
        config = self.sandbox_config(spec, image, run_id=run_id)
        shared = spec.verifier_mode == "shared"
        if env.compose is None and env.config.healthcheck is None:
            if not shared:
                config = config.model_copy(update={"clean_room_network": spec.verifier_network})
            return DockerSandbox(config)
        return DockerEnvironment(
            config, env, service_images=self.service_images(spec), sources=self.image_sources
        )

    def service_images(self, spec: SandboxSpec) -> dict[str, str] | None:
        """The sidecars' prepared image ids (None: not prepared in this process)."""
        env = spec.environment
        return self._service_images.get((str(env.root), env.task_hash))

    def sandbox_config(
        self, spec: SandboxSpec, image: PreparedImage, *, run_id: str
    ) -> DockerSandboxConfig:
        """The main container's configuration of ``spec``'s sandboxes."""
        env = spec.environment
        limits = env.config
        cpus, memory_mb, _ = clamp_limits(limits.cpus, limits.memory_mb, engine_capacity())
        shared = spec.verifier_mode == "shared"
        return DockerSandboxConfig(
            image=image.image_id or image.tag,
            network=spec.agent_network,
            # only a shared verifier changes this container's network; a fresh one has its own
            verifier_network=spec.verifier_network if shared else None,
            cpus=cpus,
            memory_mb=memory_mb,
            storage_mb=limits.storage_mb,
            workdir=limits.workdir,
            env=limits.env,
            runtime=spec.runtime,
            run_id=run_id,
            task_id=env.task_id,
            entrypoint=env.main_entrypoint,
            command=env.main_command,
            restart_clean_room=spec.clean_room == "restart",
            sidecar_network=spec.sidecar_network,
            realism=spec.realism,
        )

    def fork_unsupported(self, spec: SandboxSpec) -> str | None:
        return fork_unsupported(spec)

    def warm_parent(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> WarmParent:
        config = self.sandbox_config(spec, image, run_id=run_id)
        return DockerWarmParent(
            config,
            spec.environment,
            self.service_images(spec),
            self.image_sources,
            not_worth=self._not_worth_forking,
            key=Forks.key(spec, image),
        )

    async def with_agent(self, image: PreparedImage, layer: AgentLayer) -> PreparedImage:
        return await build_agent_image(image, layer)

    async def with_workstation(self, image: PreparedImage, workdir: str | None) -> PreparedImage:
        return await build_workstation_image(image, workdir)

    async def reap(self) -> list[str]:
        return await asyncio.to_thread(reap_orphans)
