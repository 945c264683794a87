"""The images of a task's environment: the main container's and, with a compose file, each
sidecar's. ``image:`` goes through the same resolution as a Dockerfile's ``FROM`` (a local image,
else the alias table: ``postgres:15`` and ``redis:7`` become envfarm's own service images);
``build:`` is built like a task image, tagged by the task's content hash.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict

from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.images.build import BuiltImage, LogFn
from envfarm.sandbox.docker.images.task_images import build_task_image, prebuilt_image
from envfarm.settings import ImageSource, current
from envfarm.spec.compose import MAIN_SERVICE, ComposeService


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


async def _main_image(
    environment: EnvironmentSpec, sources: list[ImageSource], on_log: LogFn | None
) -> BuiltImage:
    config, compose = environment.config, environment.compose
    main = compose.main if compose is not None else None
    timeout = config.build_timeout_sec
    if compose is not None and main is not None and main.image is not None:
        where = f"{compose.path}: services.{MAIN_SERVICE}.image"
        return await prebuilt_image(
            main.image, where=where, sources=sources, on_log=on_log, timeout=timeout
        )
    if environment.dockerfile is None:
        assert config.docker_image is not None  # the spec guarantees an image source
        return await prebuilt_image(
            config.docker_image,
            where=str(environment.root / "task.toml"),
            sources=sources,
            on_log=on_log,
            timeout=timeout,
        )
    context = environment.environment_dir
    if main is not None and main.build_context is not None:
        context = environment.environment_dir / main.build_context
    return await build_task_image(
        environment.root,
        environment.dockerfile,
        context,
        environment.task_id,
        environment.task_hash,
        timeout=timeout,
        sources=sources,
        on_log=on_log,
        buildargs=main.build_args if main is not None else None,
        target=main.build_target if main is not None else None,
    )


async def _sidecar_image(
    environment: EnvironmentSpec,
    service: ComposeService,
    sources: list[ImageSource],
    on_log: LogFn | None,
) -> BuiltImage:
    assert environment.compose is not None
    timeout = environment.config.build_timeout_sec
    env_dir = environment.environment_dir
    if service.build_context is not None and service.build_dockerfile is not None:
        return await build_task_image(
            environment.root,
            env_dir / service.build_dockerfile,
            env_dir / service.build_context,
            f"{environment.task_id}-{service.name}",
            environment.task_hash,
            timeout=timeout,
            sources=sources,
            on_log=on_log,
            buildargs=service.build_args,
            target=service.build_target,
        )
    assert service.image is not None  # the spec guarantees image or build for a sidecar
    where = f"{environment.compose.path}: services.{service.name}.image"
    return await prebuilt_image(
        service.image, where=where, sources=sources, on_log=on_log, timeout=timeout
    )


async def build_environment_images(
    environment: EnvironmentSpec,
    sources: list[ImageSource] | None = None,
    on_log: LogFn | None = None,
) -> EnvironmentImages:
    """Build or find every image the environment runs (concurrently); ``sources``: where base
    images come from (default: as the process's environment says)."""
    sources = current().sources() if sources is None else sources
    compose = environment.compose
    sidecars = list(compose.sidecars.values()) if compose is not None else []
    main, *built = await asyncio.gather(
        _main_image(environment, sources, on_log),
        *(_sidecar_image(environment, s, sources, on_log) for s in sidecars),
    )
    return EnvironmentImages(
        main=main, services={s.name: image for s, image in zip(sidecars, built, strict=True)}
    )
