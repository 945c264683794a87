"""The images envfarm runs: the user's own or pulled ones, else envfarm's offline substitutes.

A base a Dockerfile (or ``docker_image``) names is looked up in the order of
``imagesources.py``: an image the engine already holds (another task's image, a user's own tag,
a ``docker load``-ed or earlier pulled public image), then a pull through the engine
(``pull.py``), then the alias table's recipe. Three kinds of image are built here, each
labelled ``io.envfarm.managed=true`` and ``io.envfarm.kind=...`` so that ``envfarm gc`` can
find them:

* ``base``: a debootstrapped Debian rootfs (``rootfs.py``) of a root recipe's suite (bookworm,
  trixie), then one ``docker build`` step adding what the host's configuration lends it
  (``hostconfig.py``). Tagged ``envfarm/base:<suite>-<hash>`` where the hash covers the recipe
  files under images/base/ and the inherited configuration, so it is built once and rebuilt
  when either changes.
* ``alias``: the other recipes of ``images/aliases.toml`` built FROM their parent, tagged
  ``envfarm/<recipe>:<hash>`` (hash of Dockerfile, args and parent tag).
* ``task``: a task's Dockerfile with each external base rewritten to a local image, tagged
  ``envfarm-task/<task>:<content_hash[:16]>``. The label ``io.envfarm.bases`` records which
  images it was built on; a cached image whose bases have since changed is rebuilt.

Builds run the blocking SDK in a worker thread; a lock per tag (in the event loop and, through a
file lock, across processes) makes concurrent callers build once. ``on_log`` gets output lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import docker.errors
from docker.models.images import Image
from pydantic import BaseModel, ConfigDict

from envfarm.errors import ImageError, TaskSpecError
from envfarm.sandbox.aliases import (
    dockerfile_bases,
    images_dir,
    load_alias_table,
    match_alias,
    normalize_reference,
    rewrite_dockerfile,
    task_image_tag,
    unknown_base,
)
from envfarm.sandbox.docker import rootfs
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.dockerbuild import (
    BuildSpec,
    LogFn,
    exclusive,
    run_build,
    threadsafe_log,
)
from envfarm.sandbox.docker.hostconfig import HostConfig, read_host_config
from envfarm.sandbox.docker.pull import pull_image
from envfarm.sandbox.runmounts import classic_dockerfile
from envfarm.settings import ImageSource, current

LABEL_MANAGED = "io.envfarm.managed"
LABEL_KIND = "io.envfarm.kind"
LABEL_RECIPE = "io.envfarm.recipe"
LABEL_TASK = "io.envfarm.task"
LABEL_BASES = "io.envfarm.bases"
BASE_TIMEOUT_S = 1800.0


class BuiltImage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str
    build_s: float
    cached: bool
    warnings: list[str] = []


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str
    target: str
    recipe: str | None
    identity: str
    warnings: list[str] = []


def _digest(*parts: str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(f"{len(part)}:{part}".encode())
    return hasher.hexdigest()[:12]


def _labels(kind: str, **extra: str) -> dict[str, str]:
    return {LABEL_MANAGED: "true", LABEL_KIND: kind, **extra}


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
    args = " ".join(f"{key}={value}" for key, value in sorted(spec.args.items()))
    dockerfile = images_dir() / spec.dockerfile
    context = [  # the files a recipe COPYs (entry points): changing one rebuilds the image
        f"{path.name}\n{_read(path)}"
        for path in sorted(dockerfile.parent.iterdir())
        if path.is_file() and path.name != dockerfile.name
    ]
    return f"envfarm/{recipe}:{_digest(_read(dockerfile), args, parent, *context)}"


async def _local_image(reference: str) -> Image | None:
    def call() -> Image | None:
        try:
            return docker_client().images.get(reference)
        except docker.errors.APIError as exc:
            if exc.is_client_error():
                return None
            raise ImageError(f"cannot inspect image {reference!r}: {exc}") from exc

    return await asyncio.to_thread(call)


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
        if found := await _local_image(tag):
            return BuiltImage(tag=tag, image_id=found.id, build_s=0.0, cached=True)
        start = time.monotonic()
        rootfs_tag = _rootfs_tag(host)
        async with exclusive(rootfs_tag):
            if not await _local_image(rootfs_tag):
                layout = rootfs.load_rootfs_recipe(images_dir() / "base/rootfs.toml")
                labels = _labels("base", **{LABEL_RECIPE: "rootfs"})
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
                labels=_labels("base", **{LABEL_RECIPE: "base"}),
                buildargs={"ROOTFS": rootfs_tag, **host.proxy_env},
                timeout=timeout,
            )
            image_id = await run_build(spec, on_log)
        return BuiltImage(tag=tag, image_id=image_id, build_s=_since(start), cached=False)


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
        if found := await _local_image(tag):
            return BuiltImage(tag=tag, image_id=found.id, build_s=0.0, cached=True)
        start = time.monotonic()
        parent = await ensure_recipe_image(spec.parent, on_log=on_log, timeout=timeout)
        dockerfile = images_dir() / spec.dockerfile
        build = BuildSpec(
            where=f"image recipe {recipe!r} ({spec.dockerfile})",
            context=dockerfile.parent,
            dockerfile=dockerfile,
            tag=tag,
            labels=_labels("alias", **{LABEL_RECIPE: recipe}),
            buildargs={"BASE": parent.tag, **spec.args, **host.proxy_env},
            timeout=timeout,
        )
        image_id = await run_build(build, on_log)
        return BuiltImage(tag=tag, image_id=image_id, build_s=_since(start), cached=False)


async def _plan_base(
    reference: str, where: str, host: HostConfig, sources: Sequence[ImageSource] | None
) -> _Base:
    """Where ``reference`` comes from, in the order of ``sources`` (default: as the process's
    environment says, ``Settings.sources``)."""
    tried: list[str] = []
    for source in current().sources() if sources is None else sources:
        if source == "local":
            normalised, notes = normalize_reference(reference)
            for name in dict.fromkeys([reference, normalised]):
                if found := await _local_image(name):
                    warnings = notes if name != reference else []
                    return _Base(
                        reference=reference,
                        target=name,
                        recipe=None,
                        identity=found.id,
                        warnings=warnings,
                    )
        elif source == "pull":
            outcome = await asyncio.to_thread(pull_image, reference)
            if outcome.pulled and (found := await _local_image(reference)):
                return _Base(reference=reference, target=reference, recipe=None, identity=found.id)
            tried.append(f"pull: {outcome.message}")
        elif match := match_alias(reference):
            tag = recipe_image_tag(match.recipe, host)
            return _Base(
                reference=reference,
                target=tag,
                recipe=match.recipe,
                identity=tag,
                warnings=match.warnings,
            )
    raise unknown_base(reference, where, tried=tried)


async def prebuilt_image(
    name: str,
    *,
    where: str,
    sources: Sequence[ImageSource] | None = None,
    on_log: LogFn | None = None,
    timeout: float = BASE_TIMEOUT_S,
) -> BuiltImage:
    """The image for task.toml's ``[environment].docker_image``: local image, else alias.

    ``where`` names the source in errors (e.g. the task.toml path).
    """
    base = await _plan_base(name, where, read_host_config(), sources)
    if base.recipe is None:
        return BuiltImage(tag=name, image_id=base.identity, build_s=0.0, cached=True)
    built = await ensure_recipe_image(base.recipe, on_log=on_log, timeout=timeout)
    return built.model_copy(update={"warnings": base.warnings})


async def build_task_image(
    task_root: Path,
    dockerfile: Path,
    context_dir: Path,
    tag_hint: str,
    content_hash: str,
    *,
    timeout: float,
    sources: Sequence[ImageSource] | None = None,
    on_log: LogFn | None = None,
    buildargs: dict[str, str] | None = None,
    target: str | None = None,
) -> BuiltImage:
    """Build a task's environment image (``tag_hint`` is the task id; a compose service's image
    uses ``<task id>-<service>``). ``buildargs`` and ``target`` (a stage) come from the compose
    file's ``build:``."""
    try:
        text = await asyncio.to_thread(dockerfile.read_text)
    except OSError as exc:
        raise TaskSpecError(str(dockerfile), f"cannot read the Dockerfile: {exc}") from exc
    where = str(dockerfile)
    text, warnings = classic_dockerfile(text, where)
    host = read_host_config()
    bases = [await _plan_base(ref, where, host, sources) for ref in dockerfile_bases(text, where)]
    warnings += [warning for base in bases for warning in base.warnings]
    identity = " ".join(base.identity for base in bases)
    tag = task_image_tag(tag_hint, content_hash)
    async with exclusive(tag):
        found = await _local_image(tag)
        if found and found.labels.get(LABEL_BASES) == identity:
            return BuiltImage(
                tag=tag, image_id=found.id, build_s=0.0, cached=True, warnings=warnings
            )
        start = time.monotonic()
        for recipe in dict.fromkeys(base.recipe for base in bases if base.recipe):
            await ensure_recipe_image(recipe, on_log=on_log)
        rewritten = rewrite_dockerfile(text, {b.reference: b.target for b in bases}, where)
        with tempfile.TemporaryDirectory(prefix="envfarm-dockerfile-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(rewritten)
            shown = (
                dockerfile.relative_to(task_root)
                if dockerfile.is_relative_to(task_root)
                else dockerfile
            )
            spec = BuildSpec(
                where=f"task {tag_hint} ({shown})",
                context=context_dir,
                dockerfile=Path(tmp) / "Dockerfile",
                tag=tag,
                labels=_labels("task", **{LABEL_TASK: tag_hint, LABEL_BASES: identity}),
                buildargs={**host.proxy_env, **(buildargs or {})},
                timeout=timeout,
                target=target,
            )
            image_id = await run_build(spec, on_log)
        return BuiltImage(
            tag=tag, image_id=image_id, build_s=_since(start), cached=False, warnings=warnings
        )


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)
