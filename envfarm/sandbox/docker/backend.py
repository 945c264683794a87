"""The local Docker engine as a ``SandboxBackend``: task images built here, one container each."""

from __future__ import annotations

import asyncio

from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.docker.images import BuiltImage, build_task_image, prebuilt_image
from envfarm.sandbox.docker.reaper import reap_orphans
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.spec.task import Task


class DockerBackend(SandboxBackend):
    name = "docker"

    def __init__(self, runtime: str | None = None) -> None:
        self.runtime = runtime

    async def prepare(self, task: Task) -> PreparedImage:
        env = task.config.environment
        built: BuiltImage
        if task.dockerfile is None:
            assert env.docker_image is not None  # the spec guarantees one or the other
            built = await prebuilt_image(
                env.docker_image, where=str(task.root / "task.toml"), timeout=env.build_timeout_sec
            )
        else:
            built = await build_task_image(
                task.root,
                task.dockerfile,
                task.environment_dir,
                task.id,
                task.content_hash,
                timeout=env.build_timeout_sec,
            )
        return PreparedImage(
            tag=built.tag,
            image_id=built.image_id,
            build_s=built.build_s,
            cached=built.cached,
            warnings=built.warnings,
        )

    def create(self, task: Task, image: PreparedImage, *, run_id: str) -> Sandbox:
        env = task.config.environment
        return DockerSandbox(
            DockerSandboxConfig(
                image=image.image_id or image.tag,
                network=task.config.agent_network(),
                cpus=env.cpus,
                memory_mb=env.memory_mb,
                workdir=env.workdir,
                env=env.env,
                runtime=self.runtime,
                run_id=run_id,
                task_id=task.id,
            )
        )

    async def reap(self) -> list[str]:
        return await asyncio.to_thread(reap_orphans)
