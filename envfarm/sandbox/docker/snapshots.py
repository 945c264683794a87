"""Snapshots of a frozen environment's containers and volumes (blocking docker calls).

A container's file system becomes an image by ``docker commit``: on the btrfs storage driver
``scripts/setup`` gives the engine, each container later created from it is a subvolume
snapshot, not a copy. The committed image keeps the original image's configuration (its
``ENTRYPOINT``, ``CMD``, user, healthcheck), not the container's, so a copy is created exactly as
a cold container of the original would be. A volume (a database's data directory) is copied by
a helper container that mounts the parent's volume read-only and the copy's empty one, with
``cp --reflink=auto``: on btrfs a clone of each file's extents, so a few million rows cost
metadata, not their size.

A sidecar whose file system holds nothing a copy must keep is not committed at all: its copies
start from its original image, so they can be created before the freeze. ``changes_to_keep``
reads the engine's diff of the stopped container: what a restart clears (``/run``, ``/tmp``),
the mount points (the engine's init's too) and the task's files envfarm puts in every copy,
and directories changed only because something under them did, are not kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import docker.errors

from envfarm.errors import SandboxError, SandboxStartError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.containers import remove_in_background

STOP_TIMEOUT_S = 60
COPY_TIMEOUT_S = 600
CLEARED_ON_RESTART = ("/run", "/var/run", "/tmp")
"""What a service's restart (a copy starts its services again, as on a reboot) finds cleared
or rewrites, so a copy need not keep it (the FHS's run-time and temporary files)."""
INIT_MOUNTS = ("/sbin/docker-init", "/usr/sbin/docker-init")
"""Where the engine mounts its init (``init: true``), ``/sbin`` often a link to ``/usr/sbin``."""
CHANGED = 0
GATE_OPEN = "open"
"""The file whose presence in a copy's gate volume lets its held sidecars go (``gates.py``)."""


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


def changes_to_keep(changes: Sequence[dict[str, object]], mounts: Sequence[str]) -> list[str]:
    """The paths among a stopped container's file-system ``changes`` (the engine's diff:
    ``Path``, ``Kind``) that a copy created from its original image would lack; ``mounts``:
    the targets of its mounts (a copy mounts its own, or is given the same files)."""
    paths = [str(change["Path"]) for change in changes]
    roots = [*CLEARED_ON_RESTART, *INIT_MOUNTS, *mounts]
    kept = []
    for change, path in zip(changes, paths, strict=True):
        if any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots):
            continue
        inside = path.rstrip("/") + "/"
        if change["Kind"] == CHANGED and any(p.startswith(inside) for p in paths if p != path):
            continue  # a directory, changed because something under it did
        kept.append(path)
    return kept


def layer_changes(container_id: str) -> list[dict[str, object]]:
    """The engine's diff of the container's file system against its image."""
    try:
        return list(docker_client().api.diff(container_id) or [])
    except docker.errors.APIError as exc:
        failed = f"could not read the changes of container {container_id[:12]}: {exc}"
        raise SandboxError(failed) from exc


def remove_image(image_id: str) -> None:
    try:
        docker_client().api.remove_image(image_id, force=True, noprune=False)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not remove snapshot {image_id[:19]}: {exc}") from exc


VolumeCopy = tuple[list[tuple[str, str]], str | None]
"""One copy's volumes (``from``, ``to``) and its gate volume (``gates.py``), opened once they
are filled."""


def copy_volumes(copies: list[VolumeCopy], helper: str, labels: dict[str, str]) -> None:
    """Fill each empty volume ``to`` with the contents of ``from`` (owners, modes and times
    kept), then open its copy's gate, in one helper container from ``helper``, the copies side
    by side; SandboxStartError when one fails."""
    if not copies:
        return
    volumes = []
    script = ["status=0", "pids="]
    for index, (pairs, gate) in enumerate(copies):  # side by side: the kernel's metadata work
        steps = []
        for number, (source, target) in enumerate(pairs):
            volumes += [f"{source}:/from/{index}-{number}:ro", f"{target}:/to/{index}-{number}:rw"]
            steps.append(f"cp -a --reflink=auto /from/{index}-{number}/. /to/{index}-{number}/")
        if gate is not None:
            volumes.append(f"{gate}:/gate/{index}:rw")
            steps.append(f": > /gate/{index}/{GATE_OPEN}")
        script.append(f'({" && ".join(steps) or ":"}) & pids="$pids $!"')
    script += ['for pid in $pids; do wait "$pid" || status=1; done', 'exit "$status"']
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
    finally:  # off the copies' start (a removal takes the engine up to a second or more);
        remove_in_background(container)  # its labels let the sweep or the reaper do it too
