"""A copy's sidecar started before its data is there, held at a gate (``surroundings.py``).

A fork's copies are made while their warm environment warms (``fork.py``), but a sidecar's
volumes can be filled only once that one is frozen, and a start costs the engine a few tenths
of a second of CPU (its file system, cgroups and two network endpoints): sixteen copies'
starts after the freeze took about 3 s on two cores (bench/RESULTS.md). So a copy's sidecar
with volumes to fill and nothing to wait for (no ``depends_on``) is started at once, held: its
entrypoint is a shell that waits for ``OPEN_FILE`` and then ``exec``\\ s the service's own argv
(the compose file's entrypoint and command, else the image's, as the engine combines them), so
once it is let go its process tree, environment and user are those of a cold start. The gate
is opened by putting that file into the container once its volumes are filled, and a
``SIGCONT`` (harmless whenever it arrives; the engine's init passes it on) wakes the shell at
once; the shell also looks every second. A service without an argv, or an image without
``/bin/sh``, is not held.
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

import docker.errors

from envfarm.errors import SandboxStartError
from envfarm.sandbox.docker.client import docker_client
from envfarm.spec.compose import ComposeService

OPEN_FILE = ".envfarm-open"
_HOLD = (
    f'trap : CONT; while [ ! -e /{OPEN_FILE} ]; do sleep 1 & wait "$!"; done; '
    'kill "$!" 2>/dev/null; exec "$@"'
)


def held_argv(service: ComposeService, image_config: dict[str, Any]) -> dict[str, Any] | None:
    """The ``entrypoint`` and ``command`` that hold the service, then run its own argv; None
    when it has none (the engine would refuse it)."""
    image_entry = list(image_config.get("Entrypoint") or [])
    entry = image_entry if service.entrypoint is None else service.entrypoint
    if service.command is not None:
        command = service.command
    else:  # an entrypoint of the compose file's clears the image's command
        command = list(image_config.get("Cmd") or []) if service.entrypoint is None else []
    argv = [*entry, *command]
    if not argv:
        return None
    return {"entrypoint": ["/bin/sh", "-c", _HOLD, "envfarm-hold"], "command": argv}


def open_gate(container_id: str, name: str) -> None:
    """Let the held sidecar go. SandboxStartError when the engine refuses."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(OPEN_FILE)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(b""))
    api = docker_client().api
    try:
        api.put_archive(container_id, "/", buffer.getvalue())
        api.kill(container_id, signal="SIGCONT")
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"service {name!r}: could not let it start: {exc}") from exc
