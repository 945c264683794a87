"""Every base image a task names, resolved without pulling: what ``envfarm check --no-run``
says about images before anything is built.

The references are the external bases of the main Dockerfile and of each sidecar's (``FROM``
and ``COPY --from=``, ARG defaults applied), a prebuilt ``[environment].docker_image``, and the
``image:`` of each service. Each is resolved as a run would resolve it when no registry answers:
an image the engine already holds (``exists``, when the caller can ask one), else the offline
alias table (its warning, when the substitute differs, is passed on), else it is reported as one
a run would have to pull. Backend-neutral and pure but for reading the Dockerfiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from envfarm.errors import EnvfarmError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.images.aliases import match_alias
from envfarm.sandbox.images.task_image import dockerfile_bases
from envfarm.spec.compose_interpolation import MAIN_IMAGE_PLACEHOLDER


class BaseResolution(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str
    where: str
    """The file (and field) naming it."""
    how: str
    """``local`` (the engine holds it), ``alias:<recipe>``, ``pull`` (neither) or ``error``."""
    notes: list[str] = []
    """The substitute's warnings, or what went wrong."""


def task_base_references(
    environment: EnvironmentSpec,
) -> tuple[list[tuple[str, str]], list[str]]:
    """(reference, where) for every base the environment names, and the Dockerfiles that
    cannot be read or parsed."""
    refs: list[tuple[str, str]] = []
    problems: list[str] = []
    dockerfile = environment.dockerfile
    dockerfiles: list[Path] = [dockerfile] if dockerfile is not None else []
    if environment.config.docker_image:
        refs.append((environment.config.docker_image, f"{environment.root / 'task.toml'}"))
    if environment.compose is not None:
        for service in environment.compose.services.values():
            where = f"{environment.compose.path}: services.{service.name}"
            if service.build_dockerfile is not None and service.name != "main":
                dockerfiles.append(environment.environment_dir / service.build_dockerfile)
            elif service.image is not None and service.image != MAIN_IMAGE_PLACEHOLDER:
                refs.append((service.image, f"{where}.image"))
    for path in dict.fromkeys(dockerfiles):
        try:
            text = path.read_text(encoding="utf-8")
            refs += [(ref, str(path)) for ref in dockerfile_bases(text, str(path))]
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
        except EnvfarmError as exc:
            problems.append(str(exc))
    return list(dict.fromkeys(refs)), problems


def resolve_offline(
    environment: EnvironmentSpec, exists: Callable[[str], bool] | None = None
) -> list[BaseResolution]:
    """How each base of ``environment`` would be found without a registry."""
    refs, problems = task_base_references(environment)
    found = [BaseResolution(reference="", where=p, how="error", notes=[p]) for p in problems]
    for reference, where in refs:
        if exists is not None and exists(reference):
            found.append(BaseResolution(reference=reference, where=where, how="local"))
            continue
        try:
            match = match_alias(reference)
        except EnvfarmError as exc:
            found.append(
                BaseResolution(reference=reference, where=where, how="error", notes=[str(exc)])
            )
            continue
        if match is None:
            found.append(BaseResolution(reference=reference, where=where, how="pull"))
        else:
            found.append(
                BaseResolution(
                    reference=reference,
                    where=where,
                    how=f"alias:{match.recipe}",
                    notes=list(match.warnings),
                )
            )
    return found
