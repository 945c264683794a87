"""Snapshots of a frozen environment's containers and volumes (blocking docker calls).

A container's file system becomes an image by ``docker commit``: on the btrfs storage driver
``scripts/setup`` gives the engine, each container later created from it is a subvolume
snapshot, not a copy. The committed image keeps the original image's configuration (its
``ENTRYPOINT``, ``CMD``, user, healthcheck), not the container's, so a copy is created exactly as
a cold container of the original would be. A volume (a database's data directory) is copied by
a helper container that mounts the parent's volume read-only and the copy's empty one, with
``cp --reflink=auto``: on btrfs a clone of each file's extents, so a few million rows cost
metadata, not their size.
"""

from __future__ import annotations

import contextlib

import docker.errors

from envfarm.errors import SandboxError, SandboxStartError
from envfarm.sandbox.docker.client import docker_client

STOP_TIMEOUT_S = 60
COPY_TIMEOUT_S = 600


def stop_container(container_id: str) -> None:
    """Stop with the image's stop signal (a database shuts down cleanly), then kill."""
    try:
        docker_client().api.stop(container_id, timeout=STOP_TIMEOUT_S)
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not stop container {container_id[:12]}: {exc}") from exc


def commit(container_id: str, original: str, repository: str, labels: dict[str, str]) -> str:
    """The container's file system as an image named ``repository`` with ``original``'s
    configuration and ``labels``; its id."""
    api = docker_client().api
    try:
        config = dict(docker_client().images.get(original).attrs.get("Config") or {})
        config["Labels"] = {**(config.get("Labels") or {}), **labels}
        committed = api.commit(container_id, repository=repository, tag="latest", conf=config)
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not snapshot container {container_id[:12]}: {exc}") from exc
    return str(committed["Id"])


def declared_volumes(image: str) -> set[str]:
    """The paths ``image`` declares as ``VOLUME``s (a container gets an anonymous volume
    there, whatever its image holds)."""
    try:
        config = docker_client().images.get(image).attrs.get("Config") or {}
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not inspect image {image}: {exc}") from exc
    return set(config.get("Volumes") or {})


def commit_with(
    container_id: str,
    original: str,
    repository: str,
    labels: dict[str, str],
    paths: list[str],
) -> str:
    """``commit``, with what is mounted at each of ``paths`` (volumes) copied into the image's
    own file system: a container of it needs no volume there, and gets the data as a
    snapshot of the image rather than a copy."""
    base = commit(container_id, original, f"{repository}-base", labels)
    api = docker_client().api
    try:
        staging = api.create_container(
            base, command=["true"], entrypoint=[], network_disabled=True, labels=labels
        )["Id"]
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not stage a snapshot's volumes: {exc}") from exc
    try:
        for path in paths:
            stream, _ = api.get_archive(container_id, path)
            parent = path.rstrip("/").rpartition("/")[0] or "/"
            if not api.put_archive(staging, parent, stream):
                raise SandboxError(f"the engine refused the contents of {path} for a snapshot")
        return commit(staging, original, repository, labels)
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not copy {paths} into a snapshot: {exc}") from exc
    finally:
        with contextlib.suppress(docker.errors.APIError):
            api.remove_container(staging, force=True, v=True)
        with contextlib.suppress(docker.errors.APIError):
            api.remove_image(f"{repository}-base:latest")  # untagged: the image keeps its layers


def remove_image(image_id: str) -> None:
    try:
        docker_client().api.remove_image(image_id, force=True, noprune=False)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not remove snapshot {image_id[:19]}: {exc}") from exc


def copy_volumes(pairs: list[tuple[str, str]], helper: str, labels: dict[str, str]) -> None:
    """Fill each empty volume ``to`` with the contents of ``from`` (owners, modes and times
    kept), in one helper container from ``helper``; SandboxStartError when it fails."""
    if not pairs:
        return
    volumes = []
    script = ["set -e"]
    for index, (source, target) in enumerate(pairs):
        volumes += [f"{source}:/from/{index}:ro", f"{target}:/to/{index}:rw"]
        script.append(f"cp -a --reflink=auto /from/{index}/. /to/{index}/")
    client = docker_client()
    try:
        container = client.containers.create(
            helper,
            command=["sh", "-c", "; ".join(script)],
            entrypoint=[],
            user="0:0",
            network_mode="none",
            volumes=volumes,
            labels=labels,
        )
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"could not copy the warm environment's volumes: {exc}") from exc
    try:
        container.start()
        status = container.wait(timeout=COPY_TIMEOUT_S)
        if status.get("StatusCode") != 0:
            logs = bytes(container.logs(tail=20)).decode(errors="replace").strip()
            raise SandboxStartError(f"copying the warm environment's volumes failed: {logs}")
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"could not copy the warm environment's volumes: {exc}") from exc
    finally:
        with contextlib.suppress(docker.errors.APIError):  # else the sweep or reaper does
            container.remove(force=True)
