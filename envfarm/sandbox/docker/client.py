"""The one Docker client of the process, shared by every docker-backend module.

A single ``DockerClient`` (cached per process id, so a forked worker opens its own) keeps one
HTTP connection pool to the engine; ``max_pool_size`` is large because many sandboxes exec in
parallel from worker threads. An unreachable engine becomes a ``SandboxError`` saying how to
get one, here and nowhere else.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import docker
import docker.errors

from envfarm.errors import SandboxError

API_TIMEOUT_S = 600
MAX_POOL_SIZE = 32

_clients: dict[int, docker.DockerClient] = {}
_lock = threading.Lock()
_image_configs: dict[str, dict[str, Any]] = {}
"""Image id (content-addressed) -> its ``Config``, read once per process."""


def docker_client() -> docker.DockerClient:
    """Return this process's client, connecting on first use."""
    pid = os.getpid()
    with _lock:
        client = _clients.get(pid)
        if client is None:
            try:
                client = docker.DockerClient.from_env(
                    timeout=API_TIMEOUT_S, max_pool_size=MAX_POOL_SIZE
                )
            except docker.errors.DockerException as exc:
                raise SandboxError(
                    f"cannot reach the Docker engine ({exc}); install it with "
                    "`apt-get install docker.io` and start it with `dockerd` "
                    "(or `systemctl start docker`), or point DOCKER_HOST at a running engine"
                ) from exc
            _clients[pid] = client
        return client


def image_config(image: str) -> dict[str, Any]:
    """The ``Config`` of ``image``: read once per process for an id, each time for a name (a
    tag can move). Raises the SDK's errors (``ImageNotFound``) for the caller to translate."""
    config = _image_configs.get(image)
    if config is None:
        config = dict(docker_client().images.get(image).attrs.get("Config") or {})
        if image.startswith("sha256:"):
            _image_configs[image] = config
    return config
