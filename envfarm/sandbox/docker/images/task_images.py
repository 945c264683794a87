"""The images envfarm runs: the user's own or pulled ones, else envfarm's offline substitutes.

A base a Dockerfile (or ``docker_image``) names is looked up in the order of
``sandbox/images/sources.py``: an image the engine already holds (another task's image, a user's
own tag, a ``docker load``-ed or earlier pulled public image), then a pull through the engine
(``pull.py``), then the alias table's recipe, whose image ``recipes.py`` builds (it also builds
envfarm's ``base``; both are offered here too, as ``ensure_base_image`` and
``ensure_recipe_image``).

A ``task`` image is a task's Dockerfile with each external base rewritten to a local image,
tagged ``envfarm-task/<task>:<content_hash[:16]>`` and labelled ``io.envfarm.managed=true`` and
``io.envfarm.kind=task`` (``envfarm gc`` finds it). The label ``io.envfarm.bases`` records which
images it was built on; a cached image whose bases have since changed is rebuilt.

Builds run the blocking SDK in a worker thread; a lock per tag (in the event loop and, through a
file lock, across processes) makes concurrent callers build once. ``on_log`` gets output lines.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from envfarm.errors import ImageError, TaskBuildError, TaskSpecError
from envfarm.sandbox.docker.images.build import (
    BuildSpec,
    LogFn,
    exclusive,
    run_build,
    since,
)
from envfarm.sandbox.docker.images.build import BuiltImage as BuiltImage
from envfarm.sandbox.docker.images.context import ignore_warning
from envfarm.sandbox.docker.images.failures import mirror_hosts
from envfarm.sandbox.docker.images.hostconfig import HostConfig, read_host_config
from envfarm.sandbox.docker.images.local import local_image
from envfarm.sandbox.docker.images.pull import pull_image
from envfarm.sandbox.docker.images.recipes import BASE_TIMEOUT_S, recipe_image_tag
from envfarm.sandbox.docker.images.recipes import ensure_base_image as ensure_base_image
from envfarm.sandbox.docker.images.recipes import (
    ensure_recipe_image as ensure_recipe_image,
)
from envfarm.sandbox.docker.labels import LABEL_TASK, image_labels
from envfarm.sandbox.images.aliases import match_alias, normalize_reference, unknown_base
from envfarm.sandbox.images.dockerlines import Source
from envfarm.sandbox.images.runmounts import classic_source
from envfarm.sandbox.images.task_image import dockerfile_bases, rewrite_source, task_image_tag
from envfarm.settings import ImageSource, current

LABEL_BASES = "io.envfarm.bases"


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str
    target: str
    recipe: str | None
    identity: str
    warnings: list[str] = []


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
                if found := await local_image(name):
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
            if outcome.pulled and (found := await local_image(reference)):
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
    source = Source.of(text)
    warnings = classic_source(source, where)
    host = read_host_config()
    refs = dockerfile_bases(source.text, where)
    bases = [await _plan_base(ref, where, host, sources) for ref in refs]
    warnings += [warning for base in bases for warning in base.warnings]
    if ignored := await asyncio.to_thread(ignore_warning, context_dir):
        warnings.append(ignored)
    identity = " ".join(base.identity for base in bases)
    tag = task_image_tag(tag_hint, content_hash)
    notes = [substitutions(bases)]
    async with exclusive(tag):
        found = await local_image(tag)
        if found and found.labels.get(LABEL_BASES) == identity:
            return BuiltImage(
                tag=tag, image_id=found.id, build_s=0.0, cached=True, warnings=warnings
            )
        start = time.monotonic()
        for recipe in dict.fromkeys(base.recipe for base in bases if base.recipe):
            try:
                await ensure_recipe_image(recipe, on_log=on_log)
            except ImageError as exc:  # envfarm's recipe, never the task's fault
                raise ImageError(f"{exc}\n{notes[0]}") from exc
        rewrite_source(source, {b.reference: b.target for b in bases}, where)
        with tempfile.TemporaryDirectory(prefix="envfarm-dockerfile-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(source.text)
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
                labels=image_labels("task", **{LABEL_TASK: tag_hint, LABEL_BASES: identity}),
                buildargs={**host.proxy_env, **(buildargs or {})},
                timeout=timeout,
                target=target,
                steps=source.steps(),
                notes=notes,
                mirrors=mirror_hosts(host),
            )
            image_id = await _build_twice(spec, on_log)
        return BuiltImage(
            tag=tag, image_id=image_id, build_s=since(start), cached=False, warnings=warnings
        )


def substitutions(bases: Sequence[_Base]) -> str:
    """The line every build error of a task carries: what stood in for the bases it names."""
    shown = []
    for base in bases:
        if base.recipe is None and base.target == base.reference:
            continue
        by = f"envfarm's recipe {base.recipe}" if base.recipe else f"the local image {base.target}"
        notes = [w.removeprefix(f"{base.reference}: ") for w in base.warnings]
        shown.append(f"{base.reference} by {by}" + (f" ({'; '.join(notes)})" if notes else ""))
    if not shown:
        return "substitutions: none (every base image is the one the Dockerfile names)"
    return "substitutions: " + "; ".join(shown)


async def _build_twice(spec: BuildSpec, on_log: LogFn | None) -> str:
    """``run_build``, once more when a ``RUN`` failed: failing the same way again is the
    task's fault (``TaskBuildError``); another failure is left to the caller's retries."""
    try:
        return await run_build(spec, on_log)
    except ImageError as exc:
        if exc.signature is None:
            raise
        first = exc
    if on_log is not None:
        on_log(f"envfarm: building once more, to see whether {first.signature} fails again")
    try:
        return await run_build(spec, on_log)
    except ImageError as again:
        if again.signature != first.signature:
            raise
        raise TaskBuildError(f"{again}\n(it failed the same way twice)") from None
