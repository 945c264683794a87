"""envfarm's own images, built from the recipes of ``images/aliases.toml``: the offline
substitutes a public base name maps to, and the base image the rest of envfarm builds on.

* ``base``: a debootstrapped Debian rootfs (``rootfs.py``) of a root recipe's suite (bookworm,
  trixie), then one ``docker build`` step adding what the host's configuration lends it
  (``hostconfig.py``). Tagged ``envfarm/base:<suite>-<hash>`` where the hash covers the recipe
  files under images/base/ and the inherited configuration, so it is built once and rebuilt
  when either changes.
* ``alias``: the other recipes of ``images/aliases.toml`` built FROM their parent, tagged
  ``envfarm/<recipe>:<hash>`` (hash of Dockerfile, args and parent tag).

Each carries ``io.envfarm.managed=true`` and ``io.envfarm.kind`` (``envfarm gc`` finds them)
and ``io.envfarm.recipe``. A tag is computed without building anything (``recipe_image_tag``);
an image that exists under it is not built again.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from pathlib import Path

from envfarm.errors import ImageError
from envfarm.sandbox.docker.images import rootfs
from envfarm.sandbox.docker.images.build import (
    BuildSpec,
    BuiltImage,
    LogFn,
    exclusive,
    run_build,
    since,
    threadsafe_log,
)
from envfarm.sandbox.docker.images.hostconfig import HostConfig, read_host_config
from envfarm.sandbox.docker.images.local import local_image
from envfarm.sandbox.docker.labels import image_labels
from envfarm.sandbox.images.aliases import images_dir, load_alias_table, recipe_args

LABEL_RECIPE = "io.envfarm.recipe"
BASE_TIMEOUT_S = 1800.0


def _digest(*parts: str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(f"{len(part)}:{part}".encode())
    return hasher.hexdigest()[:12]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ImageError(f"{path}: cannot read image recipe: {exc}") from exc


def _rootfs_tag(host: HostConfig) -> str:
    recipe = _read(images_dir() / "base/rootfs.toml")
    return f"envfarm/rootfs:{host.suite}-{_digest(recipe, host.debian_mirror() or '')}"


def recipe_image_tag(recipe: str, host: HostConfig | None = None) -> str:
    """The tag the recipe's image has (or will have once built): cheap, builds nothing."""
    host = host or read_host_config()
    spec = load_alias_table().recipes.get(recipe)
    if spec is None:
        raise ImageError(f"images/aliases.toml: no recipe named {recipe!r}")
    if spec.suite is not None:
        host = host.for_suite(spec.suite)
        files = sorted((images_dir() / "base").iterdir())
        parts = [f"{path.name}\n{_read(path)}" for path in files if path.is_file()]
        return f"envfarm/base:{host.suite}-{_digest(_rootfs_tag(host), host.digest(), *parts)}"
    assert spec.dockerfile is not None
    assert spec.parent is not None
    parent = recipe_image_tag(spec.parent, host)
    args = " ".join(f"{key}={value}" for key, value in sorted(recipe_args(spec).items()))
    dockerfile = images_dir() / spec.dockerfile
    context = [  # the files a recipe COPYs (entry points): changing one rebuilds the image
        f"{path.name}\n{_read(path)}"
        for path in sorted(dockerfile.parent.iterdir())
        if path.is_file() and path.name != dockerfile.name
    ]
    return f"envfarm/{recipe}:{_digest(_read(dockerfile), args, parent, *context)}"


async def ensure_base_image(
    *,
    on_log: LogFn | None = None,
    timeout: float = BASE_TIMEOUT_S,
    recipe: str = "base",
) -> BuiltImage:
    """Build a root recipe's image (default: ``base``, bookworm) unless it exists."""
    suite = load_alias_table().recipes[recipe].suite
    if suite is None:
        raise ImageError(f"images/aliases.toml: recipe {recipe!r} is not a Debian rootfs")
    host = read_host_config().for_suite(suite)
    tag = recipe_image_tag(recipe, host)
    async with exclusive(tag):
        if found := await local_image(tag):
            return BuiltImage(tag=tag, image_id=found.id, build_s=0.0, cached=True)
        start = time.monotonic()
        rootfs_tag = _rootfs_tag(host)
        async with exclusive(rootfs_tag):
            if not await local_image(rootfs_tag):
                layout = rootfs.load_rootfs_recipe(images_dir() / "base/rootfs.toml")
                labels = image_labels("base", **{LABEL_RECIPE: "rootfs"})
                log = threadsafe_log(on_log)
                await asyncio.to_thread(
                    rootfs.build_rootfs_image,
                    *(layout, suite, host.debian_mirror(), rootfs_tag, labels, log, timeout),
                )
        with tempfile.TemporaryDirectory(prefix="envfarm-base-") as tmp:
            context = Path(tmp)
            for recipe_file in (images_dir() / "base").iterdir():
                if recipe_file.is_file():
                    (context / recipe_file.name).write_bytes(recipe_file.read_bytes())
            for path, content in host.image_files().items():
                target = context / "host" / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                target.write_bytes(content)
                target.chmod(0o644)
            spec = BuildSpec(
                where=f"base image ({suite})",
                context=context,
                dockerfile=context / "Dockerfile",
                tag=tag,
                labels=image_labels("base", **{LABEL_RECIPE: "base"}),
                buildargs={"ROOTFS": rootfs_tag, **host.proxy_env},
                timeout=timeout,
            )
            image_id = await run_build(spec, on_log)
        return BuiltImage(tag=tag, image_id=image_id, build_s=since(start), cached=False)


async def ensure_recipe_image(
    recipe: str,
    *,
    on_log: LogFn | None = None,
    timeout: float = BASE_TIMEOUT_S,
) -> BuiltImage:
    """Build an alias recipe's image (and its parents) unless it exists."""
    spec = load_alias_table().recipes[recipe]
    if spec.suite is not None:
        return await ensure_base_image(on_log=on_log, timeout=timeout, recipe=recipe)
    host = read_host_config()
    tag = recipe_image_tag(recipe, host)
    assert spec.parent is not None
    assert spec.dockerfile is not None
    async with exclusive(tag):
        if found := await local_image(tag):
            return BuiltImage(tag=tag, image_id=found.id, build_s=0.0, cached=True)
        start = time.monotonic()
        parent = await ensure_recipe_image(spec.parent, on_log=on_log, timeout=timeout)
        dockerfile = images_dir() / spec.dockerfile
        build = BuildSpec(
            where=f"image recipe {recipe!r} ({spec.dockerfile})",
            context=dockerfile.parent,
            dockerfile=dockerfile,
            tag=tag,
            labels=image_labels("alias", **{LABEL_RECIPE: recipe}),
            buildargs={"BASE": parent.tag, **recipe_args(spec), **host.proxy_env},
            timeout=timeout,
        )
        image_id = await run_build(build, on_log)
        return BuiltImage(tag=tag, image_id=image_id, build_s=since(start), cached=False)
