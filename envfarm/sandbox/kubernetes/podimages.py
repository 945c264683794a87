"""Which image each container of an environment pod runs, named as the Docker backend names it.

A cluster pulls from a registry, so every image envfarm builds must have been pushed there
under the name the Docker backend gives it locally, behind ``ImageNaming.registry``:

* a task image built from a Dockerfile: ``envfarm-task/<task id>:<content hash>``, and a
  service built by the compose file: ``envfarm-task/<task id>-<service>:<content hash>``;
* a public name the alias table maps (``postgres:15``, ``python:3.11-slim``): envfarm's own
  recipe image, ``envfarm/<recipe>:<recipe_tag>``, with the table's warning when it applies;
* any other name is used as written (a cluster may be able to pull it).

The in-sandbox helper comes from ``ImageNaming.helper``, ``envfarm/sandboxd:<helper key>``
behind the same prefix: an image holding the static ``/out/sandboxd`` and ``cp``
(``envfarm push`` builds and pushes it with the rest).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.images.aliases import match_alias
from envfarm.sandbox.images.helper import helper_key
from envfarm.sandbox.images.task_image import task_image_tag
from envfarm.spec.compose import ComposeService


class ImageNaming(BaseModel):
    model_config = ConfigDict(extra="forbid")

    registry: str = ""
    """Prefix such as ``registry.example.com/team``; empty for images loaded into the nodes."""
    recipe_tag: str = "bookworm"
    helper: str = Field(default_factory=lambda: f"envfarm/sandboxd:{helper_key()}")
    """Named as ``registry`` says, like every envfarm image (``envfarm push`` pushes it)."""
    helper_binary: str = "/out/sandboxd"


class PodImages(BaseModel):
    model_config = ConfigDict(extra="forbid")

    main: str
    services: dict[str, str] = Field(default_factory=dict)
    helper: str
    helper_binary: str = "/out/sandboxd"
    warnings: list[str] = Field(default_factory=list)


def _prefixed(naming: ImageNaming, name: str) -> str:
    return f"{naming.registry.rstrip('/')}/{name}" if naming.registry else name


def named_image(reference: str, naming: ImageNaming) -> tuple[str, list[str]]:
    """A public image name as the cluster should pull it, and the alias table's warnings."""
    match = match_alias(reference)
    if match is None:
        return reference, []
    return _prefixed(naming, f"envfarm/{match.recipe}:{naming.recipe_tag}"), match.warnings


def _service_image(
    environment: EnvironmentSpec, service: ComposeService, naming: ImageNaming
) -> tuple[str, list[str]]:
    if service.build_context is not None:
        tag = task_image_tag(f"{environment.task_id}-{service.name}", environment.task_hash)
        return _prefixed(naming, tag), []
    assert service.image is not None  # the spec guarantees image or build for a sidecar
    return named_image(service.image, naming)


def helper_name(naming: ImageNaming) -> str:
    """The helper image's name as pods pull it."""
    return _prefixed(naming, naming.helper)


def cluster_images(environment: EnvironmentSpec, naming: ImageNaming | None = None) -> PodImages:
    naming = naming or ImageNaming()
    warnings: list[str] = []
    main = environment.compose.main if environment.compose is not None else None
    if main is not None and main.image is not None:
        image, warnings = named_image(main.image, naming)
    elif environment.dockerfile is None and environment.config.docker_image is not None:
        image, warnings = named_image(environment.config.docker_image, naming)
    else:
        image = _prefixed(naming, task_image_tag(environment.task_id, environment.task_hash))
    services = {}
    for name, service in (
        environment.compose.sidecars if environment.compose is not None else {}
    ).items():
        services[name], found = _service_image(environment, service, naming)
        warnings += [f"service {name}: {warning}" for warning in found]
    return PodImages(
        main=image,
        services=services,
        helper=helper_name(naming),
        helper_binary=naming.helper_binary,
        warnings=warnings,
    )
