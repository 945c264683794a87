"""Blocking engine calls on one container that the sandbox runs in a thread: reading a file
or a path's archive from it (running or stopped), stopping it now, removing it later; and the
sandbox containers this process holds, force-removed at interpreter exit."""

from __future__ import annotations

import atexit
import contextlib
import io
import tarfile
import threading

import docker.errors
import requests
from docker.models.containers import Container

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.docker.client import docker_client

live_containers: dict[str, Container] = {}
"""The sandbox containers of this process, by id, from their creation to their removal."""


def _remove_live_containers() -> None:
    for container in list(live_containers.values()):
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True, v=True)
    live_containers.clear()


atexit.register(_remove_live_containers)


def gone_error(container: Container, helper: str | None) -> SandboxGone | None:
    """Why ``container`` runs no more commands, from the engine (None: it runs). Blocking."""
    try:
        container.reload()
    except docker.errors.NotFound:
        return SandboxGone("the sandbox container vanished")
    state = container.attrs["State"]
    if state.get("Running", False):
        return None
    why = "killed by the kernel's OOM killer" if state.get("OOMKilled") else "exited"
    ended = f"; its command helper {helper} ended" if helper else ""
    return SandboxGone(f"the sandbox container {why} (exit code {state.get('ExitCode')}{ended})")


def read_archived(container: Container, path: str) -> bytes | None:
    """A file of a container, running or stopped, through the engine (None if it has none)."""
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = next((m for m in archive if m.isfile()), None)
            extracted = archive.extractfile(member) if member is not None else None
            return extracted.read() if extracted is not None else None
    except (docker.errors.DockerException, requests.RequestException, tarfile.TarError):
        return None


def read_path_archive(container_id: str, path: str, max_bytes: int) -> bytes | None:
    """``path`` of a container as the engine archives it, read up to ``max_bytes`` + 1 bytes;
    None when the container has no such path."""
    try:
        stream, _ = docker_client().api.get_archive(container_id, path)
        kept = bytearray()
        for chunk in stream:
            kept += chunk
            if len(kept) > max_bytes:
                break
        return bytes(kept)
    except docker.errors.NotFound:
        return None
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise SandboxError(
            f"could not copy {path} out of container {container_id[:12]}: {exc}"
        ) from exc


def kill_container(container: Container) -> None:
    """Stop every process of ``container`` now and wait until it has stopped."""
    try:
        container.kill()
        container.wait(timeout=60)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: it is not running any more
            raise SandboxError(f"could not stop container {container.short_id}: {exc}") from exc
    except requests.exceptions.RequestException as exc:
        raise SandboxError(f"container {container.short_id} did not stop: {exc}") from exc


def remove_in_background(container: Container | str) -> None:
    """Remove a container nobody waits for (a probe, an exited helper) on a thread of its own:
    on btrfs a removal takes the engine 0.4-1.2 s. The thread is not a daemon, so the process
    finishes the removal before it exits; the container's labels let ``envfarm gc`` and the
    reaper sweep it after a crash."""

    container_id = container if isinstance(container, str) else container.id
    if container_id is None:
        return

    def remove() -> None:
        with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
            docker_client().api.remove_container(container_id, force=True, v=True)

    threading.Thread(target=remove, name=f"envfarm-remove-{container_id[:12]}").start()
