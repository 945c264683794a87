"""``envfarm push``: the images a cluster's environment pods pull, built here and pushed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from envfarm.cli.options import command_settings
from envfarm.cli.render import console

PUSH_HELP = """Build the images the tasks' environment pods pull and push them to REGISTRY.

A cluster builds nothing: the Kubernetes backend (`envfarm serve`, `worker` and `operator` with
ENVFARM_SANDBOX_BACKEND=kubernetes) names every image behind the prefix in
ENVFARM_IMAGE_REGISTRY, e.g. registry.example/envfarm. This command builds each task's image,
its compose services' images and the sandbox helper's on this machine's Docker engine (cached
ones are reused, as by `envfarm run`) and pushes each under that name, with the registry
settings and credentials of the engine and your Docker config. Give the same prefix as the
cluster's processes; a plain-HTTP registry must be among the engine's insecure registries
(loopback ones are).

Push again after changing a task: its content hash, so its images' names, change.
"""


@click.command(help=PUSH_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--registry",
    metavar="PREFIX",
    default=None,
    help="Where to push [default: $ENVFARM_IMAGE_REGISTRY].",
)
def push(paths: tuple[Path, ...], registry: str | None) -> None:
    from envfarm.controller.cluster_images import ClusterImage, push_cluster_images
    from envfarm.errors import EnvfarmError
    from envfarm.sandbox.kubernetes.podimages import ImageNaming
    from envfarm.spec.task import discover_tasks

    prefix = registry if registry is not None else command_settings().image_registry
    if not prefix:
        raise click.UsageError("no registry: give --registry PREFIX or set ENVFARM_IMAGE_REGISTRY")
    tasks, errors = discover_tasks(list(paths))
    for error in errors:
        console.print(f"[red]skipped[/red] {error}", highlight=False)

    def report(image: ClusterImage) -> None:
        verb = "pushed" if image.pushed else "as written, not pushed:"
        console.print(f"{verb} {image.remote}", markup=False, highlight=False)

    try:
        images = asyncio.run(push_cluster_images(tasks, ImageNaming(registry=prefix), report))
    except EnvfarmError as exc:
        raise click.ClickException(str(exc)) from exc
    pushed = sum(image.pushed for image in images)
    plural = "" if len(tasks) == 1 else "s"
    console.print(f"{len(tasks)} task{plural}, {pushed} images pushed to {prefix}")
    if errors:
        raise SystemExit(1)
