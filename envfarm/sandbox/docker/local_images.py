"""Does the engine hold an image? Asked by ``envfarm check --no-run``, which pulls nothing."""

from __future__ import annotations

import docker.errors

from envfarm.errors import SandboxError
from envfarm.sandbox.docker.client import docker_client


def local_image_exists(reference: str) -> bool:
    """True when the engine has ``reference``; False when not, or when no engine answers."""
    try:
        docker_client().images.get(reference)
    except (docker.errors.DockerException, SandboxError):
        return False
    return True
