"""The Docker backend's agent layers: the task's image plus an installed agent, built once.

The layer is a plain build FROM the task image's id: the install script runs as root, then the
image's own user is restored, so the task runs as it did. The tag is keyed by the image and the
script (``AgentLayer.key``); an image already tagged so is reused.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import docker.errors

from envfarm.errors import AgentInstallError, ImageError
from envfarm.sandbox.agent_layer import MISSING_RUNTIME_EXIT, AgentLayer
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.dockerbuild import BuildSpec, exclusive, run_build
from envfarm.sandbox.docker.hostconfig import read_host_config
from envfarm.sandbox.docker.images import LABEL_KIND, LABEL_MANAGED

BUILD_TIMEOUT_S = 1200.0
LABEL_AGENT = "io.envfarm.agent"


def _image_user(reference: str) -> tuple[str | None, str]:
    """(image id if already present, the image's configured user) for a tag / the base."""
    image = docker_client().images.get(reference)
    return image.id, str((image.attrs.get("Config") or {}).get("User") or "")


async def build_agent_image(image: PreparedImage, layer: AgentLayer) -> PreparedImage:
    base = image.image_id or image.tag
    tag = f"envfarm-agent/{layer.name}:{layer.key(image)}"
    async with exclusive(tag):
        try:
            found, _ = await asyncio.to_thread(_image_user, tag)
            return image.model_copy(update={"tag": tag, "image_id": found, "cached": True})
        except docker.errors.ImageNotFound:
            pass
        _, user = await asyncio.to_thread(_image_user, base)
        with tempfile.TemporaryDirectory(prefix="envfarm-agent-") as tmp:
            (Path(tmp) / "install.sh").write_text(layer.script)
            restore = f"USER {user}\n" if user else ""
            (Path(tmp) / "Dockerfile").write_text(
                f"FROM {base}\nUSER root\nCOPY install.sh /tmp/envfarm-agent-install.sh\n"
                "RUN sh /tmp/envfarm-agent-install.sh && rm -f /tmp/envfarm-agent-install.sh\n"
                + restore
            )
            spec = BuildSpec(
                where=f"agent {layer.name} {layer.version} on {image.tag}",
                context=Path(tmp),
                dockerfile=Path(tmp) / "Dockerfile",
                tag=tag,
                labels={LABEL_MANAGED: "true", LABEL_KIND: "agent", LABEL_AGENT: layer.name},
                buildargs=read_host_config().proxy_env,
                timeout=BUILD_TIMEOUT_S,
            )
            try:
                image_id = await run_build(spec, None)
            except ImageError as exc:
                if f"non-zero code: {MISSING_RUNTIME_EXIT}" in str(exc):
                    raise AgentInstallError(str(exc)) from exc
                raise
    return image.model_copy(update={"tag": tag, "image_id": image_id, "cached": False})
