"""Per-sandbox disk limits: ``--storage-opt size`` where the engine's storage driver enforces it.

overlay2 enforces a size only on XFS mounted with project quotas and refuses the option on ext4,
the file system of most hosts. ``scripts/setup`` therefore puts Docker's data on a btrfs file
system in a loop file, with simple quotas, before it first starts dockerd: the btrfs driver
gives each container a subvolume whose quota group is limited to the task's ``storage_mb``, so a
write beyond it fails (``EDQUOT``, "Disk quota exceeded") wherever it lands in the container's
file system (docs/sandbox.md, "Disk limits").

Whether the engine enforces a size is decided once per process (one client, one engine):
``docker info`` names the driver; a driver that can (btrfs, zfs, devicemapper, overlay2 on XFS)
is then probed by creating, and removing, a container with a size, since only the engine knows
whether the quota is there. An engine that cannot gets no ``storage_opt`` and the sandboxes run
without a disk limit: envfarm says so in one warning, never silently.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import docker.errors
from pydantic import BaseModel, ConfigDict

from envfarm.errors import SandboxError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.containers import remove_in_background

log = logging.getLogger(__name__)

LIMITING_DRIVERS = ("btrfs", "zfs", "devicemapper")
PROBE_SIZE = "10G"
"""Above the image's size: btrfs with full qgroups counts the image's files in the limit."""
REMEDY = (
    "run scripts/setup while dockerd is stopped to move Docker's data onto a btrfs loop file "
    "with quotas (docs/sandbox.md, 'Disk limits')"
)


class StorageSupport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enforced: bool
    driver: str
    backing_fs: str = ""
    reason: str = ""
    """Why a limit cannot be enforced (empty when it can)."""

    def describe(self) -> str:
        on = f" on {self.backing_fs}" if self.backing_fs else ""
        return f"storage driver {self.driver}{on}"


_support: dict[int, StorageSupport] = {}
_lock = threading.Lock()


def driver_from_info(info: dict[str, Any]) -> StorageSupport:
    """What ``docker info`` alone says: ``enforced`` means "worth probing", reason otherwise."""
    driver = str(info.get("Driver") or "unknown")
    status = {str(key): str(value) for key, value in info.get("DriverStatus") or []}
    backing = status.get("Backing Filesystem", "")
    found = StorageSupport(enforced=True, driver=driver, backing_fs=backing)
    if driver in LIMITING_DRIVERS or (driver == "overlay2" and backing == "xfs"):
        return found
    reason = f"the engine's {found.describe()} cannot limit a container's disk"
    return found.model_copy(update={"enforced": False, "reason": reason})


def storage_support(image: str, labels: dict[str, str]) -> StorageSupport:
    """Can the engine limit a container's disk? Decided once per process (blocking: the first
    call may create and remove a probe container from ``image``, labelled ``labels``)."""
    pid = os.getpid()
    with _lock:
        known = _support.get(pid)
        if known is None:
            known = _detect(image, labels)
            _support[pid] = known
            if not known.enforced:
                log.warning("sandbox storage limits are NOT enforced: %s; %s", known.reason, REMEDY)
        return known


def storage_options(storage_mb: int | None, image: str, labels: dict[str, str]) -> dict[str, Any]:
    """``containers.create`` arguments limiting the container's disk to ``storage_mb`` MiB:
    none when ``storage_mb`` is None or the engine cannot enforce a limit (warned once)."""
    if storage_mb is None or not storage_support(image, labels).enforced:
        return {}
    return {"storage_opt": {"size": f"{storage_mb}M"}}


def _detect(image: str, labels: dict[str, str]) -> StorageSupport:
    client = docker_client()
    try:
        found = driver_from_info(client.info())
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"could not ask the Docker engine for its storage driver: {exc}"
        ) from exc
    if not found.enforced:
        return found
    try:
        probe = client.containers.create(
            image,
            command=["true"],
            entrypoint=[],
            network_mode="none",
            labels=labels,
            storage_opt={"size": PROBE_SIZE},
        )
    except docker.errors.ImageNotFound:
        raise  # the caller's error: not an answer about the engine
    except docker.errors.APIError as exc:
        reason = f"the engine's {found.describe()} refused a size: {exc.explanation or exc}"
        return found.model_copy(update={"enforced": False, "reason": reason})
    except docker.errors.DockerException as exc:
        raise SandboxError(f"could not probe the engine's disk limits: {exc}") from exc
    remove_in_background(probe)  # the answer is known: the creation was accepted
    return found
