"""The Docker backend's workstation layers (``sandbox/images/workstation.py``): a plain build
FROM the task image's id that runs the layer's script as root and restores the image's own
user, tagged ``envfarm-workstation/<task image>:<key>`` and reused when that tag exists."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import docker.errors

from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.build import BuildSpec, exclusive, run_build
from envfarm.sandbox.docker.images.hostconfig import read_host_config
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED
from envfarm.sandbox.images.workstation import SCRIPT, layer_key, setup_command

BUILD_TIMEOUT_S = 1200.0
SCRIPT_PATH = "/tmp/workstation-setup.sh"


def _image(reference: str) -> tuple[str | None, str]:
    image = docker_client().images.get(reference)
    return image.id, str((image.attrs.get("Config") or {}).get("User") or "")


async def build_workstation_image(image: PreparedImage, workdir: str | None) -> PreparedImage:
    reference = image.image_id or image.tag
    name = image.tag.split("/")[-1].split(":")[0] or "image"
    tag = f"envfarm-workstation/{name}:{layer_key(image, workdir)}"
    async with exclusive(tag):
        try:
            found, _ = await asyncio.to_thread(_image, tag)
            return image.model_copy(update={"tag": tag, "image_id": found, "cached": True})
        except docker.errors.ImageNotFound:
            pass
        _, user = await asyncio.to_thread(_image, reference)
        run = setup_command(workdir).format(path=SCRIPT_PATH)
        restore = f"USER {user}\n" if user else ""
        dockerfile = (
            f"FROM {reference}\nUSER root\nCOPY setup.sh {SCRIPT_PATH}\n"
            f"RUN {run} && rm -f {SCRIPT_PATH}\n{restore}"
        )
        with tempfile.TemporaryDirectory(prefix="envfarm-workstation-") as tmp:
            (Path(tmp) / "setup.sh").write_text(SCRIPT)
            (Path(tmp) / "Dockerfile").write_text(dockerfile)
            spec = BuildSpec(
                where=f"the workstation layer on {image.tag}",
                context=Path(tmp),
                dockerfile=Path(tmp) / "Dockerfile",
                tag=tag,
                labels={LABEL_MANAGED: "true", LABEL_KIND: "workstation"},
                buildargs=read_host_config().proxy_env,
                timeout=BUILD_TIMEOUT_S,
            )
            image_id = await run_build(spec, None)
    return image.model_copy(update={"tag": tag, "image_id": image_id, "cached": False})
