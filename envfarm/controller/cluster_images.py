"""Every image a cluster's environment pods pull, built on this machine's engine and pushed
under the names the Kubernetes backend gives them (``envfarm push``; docs/kubernetes.md).

What a task needs is what ``cluster_images`` names for its environment: the main image, its
compose services' images, and the helper. Images built here are pushed; a name used as
written (a ``docker_image`` or service image outside the alias table) is the cluster's to
pull, and is reported, not pushed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from envfarm.plan.planner import environment_spec
from envfarm.sandbox.docker.images.environment_images import build_environment_images
from envfarm.sandbox.docker.images.push import helper_image, push_as
from envfarm.sandbox.kubernetes.podimages import ImageNaming, cluster_images, helper_name
from envfarm.spec.task import Task


class ClusterImage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    local: str
    remote: str
    pushed: bool
    """False for a name used as written: the cluster pulls it from where it is."""


async def push_cluster_images(
    tasks: Sequence[Task],
    naming: ImageNaming,
    on_image: Callable[[ClusterImage], None] = lambda image: None,
) -> list[ClusterImage]:
    """Build each task's images (cached ones are reused) and the helper, and push each once."""
    done: dict[str, ClusterImage] = {}

    async def push(local: str, remote: str) -> None:
        if remote in done:
            return
        pushed = local != remote
        if pushed:
            await push_as(local, remote)
        done[remote] = image = ClusterImage(local=local, remote=remote, pushed=pushed)
        on_image(image)

    await push(await helper_image(), helper_name(naming))
    for task in tasks:
        environment = environment_spec(task)
        built = await build_environment_images(environment)
        names = cluster_images(environment, naming)
        await push(built.main.tag, names.main)
        for service, image in built.services.items():
            await push(image.tag, names.services[service])
    return list(done.values())
