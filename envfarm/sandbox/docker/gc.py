"""``envfarm gc``: remove what envfarm left on the engine and keep its images within a budget.

Containers, networks and volumes go when the process that owns them is gone (the reaper's
rule: live runs are never touched). Task images are pruned oldest first until the task images
fit ``image_budget_gb``, skipping any image a container still uses; base and alias images are
kept (they are shared and slow to rebuild) unless they are dangling. The build cache is pruned
whenever images were removed or when asked.
"""

from __future__ import annotations

from typing import Any

import docker.errors
from pydantic import BaseModel, ConfigDict

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED
from envfarm.sandbox.docker.reaper import reap_orphans

GB = 1024**3


class GcReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    orphans: list[str]
    """Containers, networks and volumes of dead owners that were removed."""
    images: list[str]
    image_bytes_freed: int
    task_image_bytes_kept: int
    build_cache_bytes_freed: int


def _task_images(images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (i for i in images if (i.get("Labels") or {}).get(LABEL_KIND) == "task"),
        key=lambda image: int(image.get("Created", 0)),
    )


def collect_garbage(*, image_budget_gb: float = 20.0, prune_build_cache: bool = False) -> GcReport:
    client = docker_client().api
    orphans = reap_orphans()
    in_use = {c["ImageID"] for c in client.containers(all=True)}
    managed = client.images(all=False, filters={"label": f"{LABEL_MANAGED}=true"})
    dangling = client.images(filters={"label": f"{LABEL_MANAGED}=true", "dangling": True})
    removable = [*dangling]
    task_images = _task_images(managed)
    total = sum(int(image.get("Size", 0)) for image in task_images)
    for image in task_images:
        if total <= image_budget_gb * GB:
            break
        if image["Id"] in in_use:
            continue
        removable.append(image)
        total -= int(image.get("Size", 0))
    removed, freed = [], 0
    for image in removable:
        if image["Id"] in in_use:
            continue
        try:
            client.remove_image(image["Id"], force=True, noprune=False)
        except docker.errors.APIError:
            continue  # in use by a container that appeared meanwhile, or already gone
        removed.append(", ".join(image.get("RepoTags") or []) or image["Id"][:19])
        freed += int(image.get("Size", 0))
    cache_freed = 0
    if removed or prune_build_cache:
        cache_freed = int(client.prune_builds().get("SpaceReclaimed") or 0)
    return GcReport(
        orphans=orphans,
        images=removed,
        image_bytes_freed=freed,
        task_image_bytes_kept=max(total, 0),
        build_cache_bytes_freed=cache_freed,
    )
