"""The local Docker engine as a ``SandboxBackend``: task images built here, one container each,
plus sidecars on an internal network for a task with a compose file (``environment.py``).

``prepare`` builds every image of the environment (the main one and each sidecar's) before any
episode is admitted; the sidecars' image ids are remembered per task content hash, so ``create``
hands them to each episode's environment without another lookup. The build's output goes with
the prepared image (``buildlog.py``), for each episode's artifacts. It first refuses, with
``EnvironmentUnsupported``, a task the chosen runtime cannot run (``runtimes.py``): the run's
``runtime``, or gVisor for a task that asks for it. A task's CPUs and memory above the engine's
are clamped to them, with a warning on the prepared image (``limits.py``).

The prepared image's ``build_s`` is the wall time ``prepare`` waited for the environment's
images: the main image and the sidecars' are built at once, so their build times overlap and are
not added up, and waiting for a shared base another task is building counts, once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping

from envfarm.errors import TaskSpecError
from envfarm.sandbox.agent_layer import AgentImages, AgentLayer
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.docker.agent_layer import build_agent_image
from envfarm.sandbox.docker.buildlog import BuildLog
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.images import ensure_base_image
from envfarm.sandbox.docker.limits import clamp_limits, engine_capacity
from envfarm.sandbox.docker.reaper import reap_orphans
from envfarm.sandbox.docker.runtimes import check_task, choose_runtime
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.service_images import build_environment_images
from envfarm.spec.task import Task

CLEAN_ROOM_ENV = "ENVFARM_CLEAN_ROOM"


def clean_room_restarts(env: Mapping[str, str] | None = None) -> bool:
    """``ENVFARM_CLEAN_ROOM``: ``restart`` (the default: the agent's container restarted where
    that grades the same) or ``fresh`` (always a fresh container)."""
    value = (os.environ if env is None else env).get(CLEAN_ROOM_ENV, "").strip().lower()
    if value not in ("", "restart", "fresh"):
        raise TaskSpecError(CLEAN_ROOM_ENV, f"expected restart or fresh, got {value!r}")
    return value != "fresh"


class DockerBackend(SandboxBackend, AgentImages):
    name = "docker"

    def __init__(
        self, runtime: str | None = None, *, restart_clean_room: bool | None = None
    ) -> None:
        self.runtime = runtime
        self.restart_clean_room = (
            clean_room_restarts() if restart_clean_room is None else restart_clean_room
        )
        """False: a clean-room verifier always gets a fresh container (``grading/inplace.py``);
        None: as ``ENVFARM_CLEAN_ROOM`` says."""
        self._service_images: dict[tuple[str, str], dict[str, str]] = {}

    async def prepare(self, task: Task) -> PreparedImage:
        await asyncio.to_thread(lambda: check_task(task, self._runtime(task)))
        log = BuildLog()
        start = time.monotonic()
        images = await build_environment_images(task, on_log=log)
        if task.compose is not None:
            self._service_images[(str(task.root), task.content_hash)] = images.service_image_ids()
            if not (task.config.agent_network() and task.config.verifier_network()):
                await ensure_base_image()  # its perl removes the main container's route
        waited = round(time.monotonic() - start, 3)
        prepared = images.prepared().model_copy(update={"build_s": waited})
        built = not prepared.cached
        build_log = await asyncio.to_thread(log.settle, prepared.image_id, built)
        env = task.config.environment
        capacity = await asyncio.to_thread(engine_capacity)
        *_, clamped = clamp_limits(env.cpus, env.memory_mb, capacity)
        warnings = [*prepared.warnings, *clamped]
        return prepared.model_copy(update={"build_log": build_log, "warnings": warnings})

    def create(self, task: Task, image: PreparedImage, *, run_id: str) -> Sandbox:
        env = task.config.environment
        cpus, memory_mb, _ = clamp_limits(env.cpus, env.memory_mb, engine_capacity())
        shared = task.config.verifier.environment_mode == "shared"
        config = DockerSandboxConfig(
            image=image.image_id or image.tag,
            network=task.config.agent_network(),
            # only a shared verifier changes this container's network; a fork gets its own
            verifier_network=task.config.verifier_network() if shared else None,
            cpus=cpus,
            memory_mb=memory_mb,
            storage_mb=env.storage_mb,
            workdir=env.workdir,
            env=env.env,
            runtime=self._runtime(task),
            run_id=run_id,
            task_id=task.id,
            entrypoint=task.main_entrypoint,
            command=task.main_command,
            restart_clean_room=self.restart_clean_room,
        )
        if task.compose is None and env.healthcheck is None:
            if not shared:
                verifier_network = task.config.verifier_network()
                config = config.model_copy(update={"clean_room_network": verifier_network})
            return DockerSandbox(config)
        known = self._service_images.get((str(task.root), task.content_hash))
        return DockerEnvironment(config, task, service_images=known)

    async def with_agent(self, image: PreparedImage, layer: AgentLayer) -> PreparedImage:
        return await build_agent_image(image, layer)

    def _runtime(self, task: Task) -> str | None:
        """Blocking the first time (the engine's runtimes, then cached)."""
        return choose_runtime(task, self.runtime)

    async def reap(self) -> list[str]:
        return await asyncio.to_thread(reap_orphans)
