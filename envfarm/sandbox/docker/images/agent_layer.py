"""The Docker backend's agent layers: the task's image plus an installed agent, built once.

The layer is a plain build FROM the task image's id: the install script runs as root, then the
image's own user is restored, so the task runs as it did. The tag is keyed by the image and the
script (``AgentLayer.key``); an image already tagged so is reused.

npm packages are installed on envfarm's ``node`` recipe image into ``AGENT_DIR`` (an image of
their own, keyed by the package list and that image, so every task image shares one install),
and the layer copies that directory in first. npm there picks the platform packages of the
machine's own architecture (optional dependencies such as Codex CLI's native binary). The
layer's ``shared_script`` (a virtualenv) runs once per base image, the one the task image's
``io.envfarm.bases`` label names when it names one, and is copied in the same way; a task
image with no such base runs it in its own layer.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import tempfile
from pathlib import Path

import docker.errors

from envfarm.errors import AgentInstallError, ImageError
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.build import BuildSpec, exclusive, run_build
from envfarm.sandbox.docker.images.hostconfig import read_host_config
from envfarm.sandbox.docker.images.recipes import ensure_recipe_image
from envfarm.sandbox.docker.images.task_images import LABEL_BASES
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED
from envfarm.sandbox.images.agent_layer import AGENT_DIR, MISSING_RUNTIME_EXIT, AgentLayer

BUILD_TIMEOUT_S = 1200.0
LABEL_AGENT = "io.envfarm.agent"


def _image_info(reference: str) -> tuple[str | None, str, dict[str, str]]:
    """(image id, the image's configured user, its labels) for a tag or id."""
    image = docker_client().images.get(reference)
    config = image.attrs.get("Config") or {}
    return image.id, str(config.get("User") or ""), dict(config.get("Labels") or {})


async def _found(tag: str) -> str | None:
    try:
        found, _, _ = await asyncio.to_thread(_image_info, tag)
    except docker.errors.ImageNotFound:
        return None
    return found


async def _build(layer: AgentLayer, where: str, tag: str, dockerfile: str, script: str) -> str:
    """Build ``dockerfile`` (``install.sh`` holding ``script`` beside it); the image id."""
    with tempfile.TemporaryDirectory(prefix="envfarm-agent-") as tmp:
        (Path(tmp) / "install.sh").write_text(script)
        (Path(tmp) / "Dockerfile").write_text(dockerfile)
        spec = BuildSpec(
            where=where,
            context=Path(tmp),
            dockerfile=Path(tmp) / "Dockerfile",
            tag=tag,
            labels={LABEL_MANAGED: "true", LABEL_KIND: "agent", LABEL_AGENT: layer.name},
            buildargs=read_host_config().proxy_env,
            timeout=BUILD_TIMEOUT_S,
        )
        try:
            return await run_build(spec, None)
        except ImageError as exc:
            if f"non-zero code: {MISSING_RUNTIME_EXIT}" in str(exc):
                raise AgentInstallError(str(exc)) from exc
            raise


_RUN_SCRIPT = (
    "COPY install.sh /tmp/envfarm-agent-install.sh\n"
    "RUN sh /tmp/envfarm-agent-install.sh && rm -f /tmp/envfarm-agent-install.sh\n"
)


async def _shared(layer: AgentLayer, kind: str, base: str, key_text: str, script: str) -> str:
    """The tag of an image FROM ``base`` with ``script`` run (built once per key)."""
    key = hashlib.sha256(f"{base}\n{key_text}".encode()).hexdigest()[:16]
    tag = f"envfarm-agent-{kind}/{layer.name}:{key}"
    async with exclusive(tag):
        if await _found(tag) is None:
            where = f"agent {layer.name} {layer.version}: its {kind} install on {base}"
            await _build(layer, where, tag, f"FROM {base}\nUSER root\n{_RUN_SCRIPT}", script)
    return tag


async def build_npm_image(layer: AgentLayer) -> str:
    """The tag of an image holding ``AGENT_DIR/node_modules`` with ``layer.npm`` installed."""
    node = await ensure_recipe_image("node")
    packages = " ".join(shlex.quote(p) for p in layer.npm)
    script = (
        f"set -e\nmkdir -p {AGENT_DIR}\nnpm install --prefix {AGENT_DIR} --no-audit --no-fund "
        f"--no-update-notifier --omit=dev {packages}\nrm -rf /root/.npm\n"
    )
    return await _shared(layer, "npm", node.image_id, script, script)


async def _task_base(reference: str) -> str | None:
    """The one image the task's image was built FROM (as envfarm built it), else None."""
    _, _, labels = await asyncio.to_thread(_image_info, reference)
    bases = labels.get(LABEL_BASES, "").split()
    return bases[0] if len(bases) == 1 else None


async def build_agent_image(image: PreparedImage, layer: AgentLayer) -> PreparedImage:
    reference = image.image_id or image.tag
    tag = f"envfarm-agent/{layer.name}:{layer.key(image)}"
    async with exclusive(tag):
        if (found := await _found(tag)) is not None:
            return image.model_copy(update={"tag": tag, "image_id": found, "cached": True})
        _, user, _ = await asyncio.to_thread(_image_info, reference)
        sources = [await build_npm_image(layer)] if layer.npm else []
        script = layer.script
        if layer.shared_script:
            base = await _task_base(reference)
            if base is None:  # nothing to share with: the whole install in this layer
                script = layer.shared_script + "\n" + script
            else:
                shared_id = (await asyncio.to_thread(_image_info, base))[0] or base
                sources.append(
                    await _shared(
                        layer, "base", shared_id, layer.shared_script, layer.shared_script
                    )
                )
        copied = "".join(f"COPY --from={source} {AGENT_DIR} {AGENT_DIR}\n" for source in sources)
        restore = f"USER {user}\n" if user else ""
        dockerfile = f"FROM {reference}\nUSER root\n{copied}{_RUN_SCRIPT}{restore}"
        where = f"agent {layer.name} {layer.version} on {image.tag}"
        image_id = await _build(layer, where, tag, dockerfile, script)
    return image.model_copy(update={"tag": tag, "image_id": image_id, "cached": False})
