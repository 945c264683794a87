"""Leak-proof teardown across crashes: remove what processes that are gone left behind.

Every container (sandboxes, sidecars, helpers), environment network and episode volume is
labelled with its owner as ``host:pid``. A run that was SIGKILLed cannot clean up after itself,
so each new run first removes what this host's dead processes left behind: containers first,
then a warm environment's snapshots (images labelled ``kind=fork``, ``fork.py``), then
networks (which cannot go while a container is attached), then volumes (likewise).
Resources owned by live processes, or by other hosts sharing the engine, are left alone.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping

import docker.errors

from envfarm.errors import SandboxError
from envfarm.processes import pid_alive
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER
from envfarm.sandbox.docker.networks import remove_network

MANAGED: dict[str, str | list[str] | bool] = {"label": [f"{LABEL_MANAGED}=true"]}


def _orphaned(labels: Mapping[str, str] | None, host: str) -> bool:
    owner_host, _, pid = (labels or {}).get(LABEL_OWNER, "").rpartition(":")
    return owner_host == host and pid.isdigit() and not pid_alive(int(pid))


def reap_orphans() -> list[str]:
    """Remove this host's envfarm containers, networks and volumes whose owner has exited;
    return their ids (volume names for volumes)."""
    host = socket.gethostname()
    client = docker_client()
    removed: list[str] = []
    for container in client.api.containers(all=True, filters=MANAGED):  # summaries: no race
        if not _orphaned(container.get("Labels"), host):
            continue
        try:
            client.api.remove_container(container["Id"], force=True, v=True)
        except docker.errors.APIError:
            continue  # gone already, or its removal is in progress (HTTP 409)
        removed.append(str(container["Id"]))
    fork = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_KIND}=fork"]}
    for image in client.api.images(filters=fork):  # a warm environment's snapshots
        if _orphaned(image.get("Labels"), host):
            try:
                client.api.remove_image(image["Id"], force=True)
            except docker.errors.APIError:
                continue  # still used by a live process's container, or gone
            removed.append(str(image["Id"]))
    for network in client.api.networks(filters=MANAGED):
        if _orphaned(network.get("Labels"), host):
            with contextlib.suppress(SandboxError):
                remove_network(network["Id"])
                removed.append(str(network["Id"]))
    for volume in client.api.volumes(filters=MANAGED).get("Volumes") or []:
        if _orphaned(volume.get("Labels"), host):
            try:
                client.api.remove_volume(volume["Name"], force=True)
            except docker.errors.APIError:
                continue  # gone already, or still used by a container a live process owns
            removed.append(str(volume["Name"]))
    return removed
