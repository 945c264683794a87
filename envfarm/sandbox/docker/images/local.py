"""Does the engine hold an image? Asked before anything is built or pulled: by the image
builders (``local_image``), and by ``envfarm check --no-run``, which pulls nothing
(``local_image_exists``)."""

from __future__ import annotations

import asyncio

import docker.errors
from docker.models.images import Image

from envfarm.errors import ImageError, SandboxError
from envfarm.sandbox.docker.client import docker_client


def local_image_exists(reference: str) -> bool:
    """True when the engine has ``reference``; False when not, or when no engine answers."""
    try:
        docker_client().images.get(reference)
    except (docker.errors.DockerException, SandboxError):
        return False
    return True


async def local_image(reference: str) -> Image | None:
    """The engine's image ``reference``, or None when it has none; ImageError when the engine
    fails to say."""

    def call() -> Image | None:
        try:
            return docker_client().images.get(reference)
        except docker.errors.APIError as exc:
            if exc.is_client_error():
                return None
            raise ImageError(f"cannot inspect image {reference!r}: {exc}") from exc

    return await asyncio.to_thread(call)
