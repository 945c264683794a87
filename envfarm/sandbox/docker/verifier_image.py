"""A verifier's image of its own on Docker (``VerifierImage``: Harbor's separate verifier
environment), built as a task's environment image is built.

A ``Dockerfile`` in the task's ``tests/`` is built with ``tests/`` as its context, byte for
byte as the task ships it (the same offline substitutes for its bases, the same build failures:
the task's when they are); an image named by ``docker_image`` is resolved as a ``FROM`` line
naming it would be (a local image, a pull, a substitute). Tagged
``envfarm-task/<task>-verifier:<hash>``, so it is built once per task content and reused.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from envfarm.sandbox.base import VerifierImage
from envfarm.sandbox.docker.images.task_images import build_task_image


async def verifier_image_tag(image: VerifierImage) -> str:
    """The local tag of ``image``, built first when needed."""
    hint = f"{image.task_id}-verifier"
    timeout = image.build_timeout_s
    if image.context is not None:
        dockerfile = image.context / "Dockerfile"
        built = await build_task_image(
            image.context.parent, dockerfile, image.context, hint, image.content_hash,
            timeout=timeout,
        )  # fmt: skip
        return built.tag
    assert image.reference is not None
    with tempfile.TemporaryDirectory(prefix="envfarm-verifier-image-") as tmp:
        dockerfile = Path(tmp) / "Dockerfile"
        dockerfile.write_text(f"FROM {image.reference}\n")
        built = await build_task_image(
            Path(tmp), dockerfile, Path(tmp), hint, image.content_hash, timeout=timeout
        )
        return built.tag
