"""The images of a task's environment: the main container's and, with a compose file, each
sidecar's. ``image:`` goes through the same resolution as a Dockerfile's ``FROM`` (a local image,
else the alias table: ``postgres:15`` and ``redis:7`` become envfarm's own service images);
``build:`` is built like a task image, tagged by the task's content hash.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict

from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.dockerbuild import LogFn
from envfarm.sandbox.docker.images import BuiltImage, build_task_image, prebuilt_image
from envfarm.spec.compose import MAIN_SERVICE, ComposeService
from envfarm.spec.task import Task


class EnvironmentImages(BaseModel):
    model_config = ConfigDict(extra="forbid")

    main: BuiltImage
    services: dict[str, BuiltImage] = {}
    """Sidecar name -> its image."""

    def prepared(self) -> PreparedImage:
        """The main image as the backend reports it, with the sidecars' time and warnings."""
        sidecars = self.services.values()
        warnings = list(self.main.warnings)
        for name, built in self.services.items():
            warnings += [f"service {name}: {warning}" for warning in built.warnings]
        return PreparedImage(
            tag=self.main.tag,
            image_id=self.main.image_id,
            build_s=round(self.main.build_s + sum(b.build_s for b in sidecars), 3),
            cached=self.main.cached and all(b.cached for b in sidecars),
            warnings=warnings,
        )

    def service_image_ids(self) -> dict[str, str]:
        return {name: built.image_id for name, built in self.services.items()}


async def _main_image(task: Task, on_log: LogFn | None) -> BuiltImage:
    env = task.config.environment
    main = task.compose.main if task.compose is not None else None
    if main is not None and main.image is not None:
        where = f"{task.compose.path}: services.{MAIN_SERVICE}.image"  # type: ignore[union-attr]
        return await prebuilt_image(
            main.image, where=where, on_log=on_log, timeout=env.build_timeout_sec
        )
    if task.dockerfile is None:
        assert env.docker_image is not None  # the spec guarantees an image source
        return await prebuilt_image(
            env.docker_image,
            where=str(task.root / "task.toml"),
            on_log=on_log,
            timeout=env.build_timeout_sec,
        )
    context = task.environment_dir
    if main is not None and main.build_context is not None:
        context = task.environment_dir / main.build_context
    return await build_task_image(
        task.root,
        task.dockerfile,
        context,
        task.id,
        task.content_hash,
        timeout=env.build_timeout_sec,
        on_log=on_log,
        buildargs=main.build_args if main is not None else None,
        target=main.build_target if main is not None else None,
    )


async def _sidecar_image(task: Task, service: ComposeService, on_log: LogFn | None) -> BuiltImage:
    assert task.compose is not None
    timeout = task.config.environment.build_timeout_sec
    if service.build_context is not None and service.build_dockerfile is not None:
        return await build_task_image(
            task.root,
            task.environment_dir / service.build_dockerfile,
            task.environment_dir / service.build_context,
            f"{task.id}-{service.name}",
            task.content_hash,
            timeout=timeout,
            on_log=on_log,
            buildargs=service.build_args,
            target=service.build_target,
        )
    assert service.image is not None  # the spec guarantees image or build for a sidecar
    where = f"{task.compose.path}: services.{service.name}.image"
    return await prebuilt_image(service.image, where=where, on_log=on_log, timeout=timeout)


async def build_environment_images(task: Task, on_log: LogFn | None = None) -> EnvironmentImages:
    """Build or find every image the task's environment runs (concurrently)."""
    sidecars = list(task.compose.sidecars.values()) if task.compose is not None else []
    main, *built = await asyncio.gather(
        _main_image(task, on_log), *(_sidecar_image(task, s, on_log) for s in sidecars)
    )
    return EnvironmentImages(
        main=main, services={s.name: image for s, image in zip(sidecars, built, strict=True)}
    )
