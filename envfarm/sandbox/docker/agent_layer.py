"""The Docker backend's agent layers: the task's image plus an installed agent, built once.

The layer is a plain build FROM the task image's id: the install script runs as root, then the
image's own user is restored, so the task runs as it did. The tag is keyed by the image and the
script (``AgentLayer.key``); an image already tagged so is reused.

npm packages are installed on envfarm's ``node`` recipe image into ``AGENT_DIR`` (an image of
their own, keyed by the package list and that image, so every task image shares one install),
and the layer copies that directory in first. npm there picks the platform packages of the
machine's own architecture (optional dependencies such as Codex CLI's native binary).
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import tempfile
from pathlib import Path

import docker.errors

from envfarm.errors import AgentInstallError, ImageError
from envfarm.sandbox.agent_layer import AGENT_DIR, MISSING_RUNTIME_EXIT, AgentLayer
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.dockerbuild import BuildSpec, exclusive, run_build
from envfarm.sandbox.docker.hostconfig import read_host_config
from envfarm.sandbox.docker.images import LABEL_KIND, LABEL_MANAGED, ensure_recipe_image

BUILD_TIMEOUT_S = 1200.0
LABEL_AGENT = "io.envfarm.agent"


def _image_user(reference: str) -> tuple[str | None, str]:
    """(image id if already present, the image's configured user) for a tag / the base."""
    image = docker_client().images.get(reference)
    return image.id, str((image.attrs.get("Config") or {}).get("User") or "")


async def _found(tag: str) -> str | None:
    try:
        found, _ = await asyncio.to_thread(_image_user, tag)
    except docker.errors.ImageNotFound:
        return None
    return found


async def build_npm_image(layer: AgentLayer) -> str:
    """The tag of an image holding ``AGENT_DIR/node_modules`` with ``layer.npm`` installed."""
    node = await ensure_recipe_image("node")
    key = hashlib.sha256("\n".join([node.image_id, *layer.npm]).encode()).hexdigest()[:16]
    tag = f"envfarm-agent-npm/{layer.name}:{key}"
    async with exclusive(tag):
        if await _found(tag) is not None:
            return tag
        packages = " ".join(shlex.quote(p) for p in layer.npm)
        with tempfile.TemporaryDirectory(prefix="envfarm-agent-npm-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(
                f"FROM {node.tag}\nRUN mkdir -p {AGENT_DIR} && npm install --prefix {AGENT_DIR} "
                f"--no-audit --no-fund --no-update-notifier --omit=dev {packages} "
                f"&& rm -rf /root/.npm\n"
            )
            await run_build(
                BuildSpec(
                    where=f"agent {layer.name} {layer.version}: npm install {packages}",
                    context=Path(tmp),
                    dockerfile=Path(tmp) / "Dockerfile",
                    tag=tag,
                    labels={LABEL_MANAGED: "true", LABEL_KIND: "agent", LABEL_AGENT: layer.name},
                    buildargs=read_host_config().proxy_env,
                    timeout=BUILD_TIMEOUT_S,
                ),
                None,
            )
    return tag


async def build_agent_image(image: PreparedImage, layer: AgentLayer) -> PreparedImage:
    base = image.image_id or image.tag
    tag = f"envfarm-agent/{layer.name}:{layer.key(image)}"
    async with exclusive(tag):
        if (found := await _found(tag)) is not None:
            return image.model_copy(update={"tag": tag, "image_id": found, "cached": True})
        _, user = await asyncio.to_thread(_image_user, base)
        copied = ""
        if layer.npm:
            copied = f"COPY --from={await build_npm_image(layer)} {AGENT_DIR} {AGENT_DIR}\n"
        with tempfile.TemporaryDirectory(prefix="envfarm-agent-") as tmp:
            (Path(tmp) / "install.sh").write_text(layer.script)
            restore = f"USER {user}\n" if user else ""
            (Path(tmp) / "Dockerfile").write_text(
                f"FROM {base}\nUSER root\n{copied}COPY install.sh /tmp/envfarm-agent-install.sh\n"
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
