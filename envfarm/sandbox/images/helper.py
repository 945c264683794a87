"""The in-sandbox helper's recipe and its key: the hash of what the helper binary is built
from. Both backends name the helper by it (the Docker backend's cached binary, the image a
cluster's pods copy it from), so a changed helper is never mistaken for the one before."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from envfarm.errors import ImageError
from envfarm.sandbox.images.aliases import images_dir

RECIPE_FILES = (
    "sandboxd.c",
    "relay.c",
    "elevate.c",
    "route.c",
    "dress.c",
    "sweep.c",
    "gvisor_compat.c",
    "sudo.c",
    "Dockerfile",
)


def recipe_dir() -> Path:
    return images_dir() / "sandboxd"


@functools.cache
def helper_key() -> str:
    """Hash of the helper's source and build recipe (what the helper binary depends on)."""
    hasher = hashlib.sha256()
    for name in RECIPE_FILES:
        try:
            content = (recipe_dir() / name).read_bytes()
        except OSError as exc:
            raise ImageError(
                f"{recipe_dir() / name}: cannot read the helper recipe: {exc}"
            ) from exc
        hasher.update(f"{name}:{len(content)}:".encode() + content)
    return hasher.hexdigest()[:16]
