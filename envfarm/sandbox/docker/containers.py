"""Blocking engine calls on one container that the sandbox runs in a thread: reading a file
from it (running or stopped) and stopping it now."""

from __future__ import annotations

import io
import tarfile

import docker.errors
import requests
from docker.models.containers import Container

from envfarm.errors import SandboxError


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
