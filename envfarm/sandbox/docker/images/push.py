"""Images handed to a registry, for a cluster's nodes to pull (``envfarm push``).

A cluster builds nothing: its pods pull every image under the name the Kubernetes backend
gives it. This engine builds them as ``envfarm run`` does and pushes each under that name. The
push goes through the engine, so its registry settings (insecure registries, certificates,
mirrors) apply, with the credentials of the user's Docker config for the registry of the name.

The helper image (``helper_image``) is envfarm's base image with the helper binary at
``/out/sandboxd``: the pods' init container copies it out with the base image's ``cp``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import docker.errors

from envfarm.errors import ImageError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.build import BuildSpec, LogFn, run_build
from envfarm.sandbox.docker.images.local import local_image
from envfarm.sandbox.docker.images.pull import split_reference
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.sandboxd import BUILD_TIMEOUT_S, ensure_helper
from envfarm.sandbox.images.helper import helper_key


async def helper_image(on_log: LogFn | None = None) -> str:
    """The local tag of an image holding the helper at ``/out/sandboxd``, built when missing."""
    tag = f"envfarm/sandboxd:{helper_key()}"
    if await local_image(tag) is not None:
        return tag
    binary = await ensure_helper(on_log=on_log)
    base = await ensure_base_image(on_log=on_log)
    with tempfile.TemporaryDirectory(prefix="envfarm-helper-image-") as tmp:
        context = Path(tmp)
        (context / "sandboxd").write_bytes(binary.read_bytes())
        (context / "sandboxd").chmod(0o755)
        (context / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY sandboxd /out/sandboxd\n")
        spec = BuildSpec(
            where="the helper image for clusters",
            context=context,
            dockerfile=context / "Dockerfile",
            tag=tag,
            labels={"io.envfarm.managed": "true", "io.envfarm.kind": "build"},
            buildargs={"BASE": base.tag},
            timeout=BUILD_TIMEOUT_S,
        )
        await run_build(spec, on_log)
    return tag


async def push_as(local: str, remote: str) -> None:
    """Tag ``local`` as ``remote`` and push it; ImageError naming both when the push fails."""
    await asyncio.to_thread(_push_blocking, local, remote)


def _push_blocking(local: str, remote: str) -> None:
    repository, tag = split_reference(remote)
    client = docker_client()
    try:
        client.images.get(local).tag(repository, tag)
        for line in client.api.push(repository, tag, stream=True, decode=True):
            if isinstance(line, dict) and line.get("error"):
                raise ImageError(f"pushing {local} as {remote} failed: {line['error']}")
    except docker.errors.DockerException as exc:
        raise ImageError(f"pushing {local} as {remote} failed: {exc}") from exc
