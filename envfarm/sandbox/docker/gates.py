r"""A copy's sidecar started before its data is there, held at a gate (``sidecar_starts.py``).

A fork's copies are made while their warm environment warms (``fork.py``), but a sidecar's
volumes can be filled only once that one is frozen, and a start costs the engine a few tenths
of a second of CPU (its file system, cgroups and two network endpoints): sixteen copies'
starts after the freeze took about 3 s on two cores (bench/RESULTS.md). So a copy's sidecar
with volumes to fill and nothing to wait for (no ``depends_on``) is started at once, held: its
entrypoint is a shell that waits for a file in the copy's gate volume (``GATE_DIR``) and then
``exec``\ s the service's own argv (the compose file's entrypoint and command, else the image's,
as the engine combines them), so once it is let go its process tree, environment and user are
those of a cold start. The helper container that copies the copy's volumes opens the gate
(``snapshots.copy_volumes``), and a ``SIGCONT`` (harmless whenever it arrives; the engine's
init passes it on) wakes the shell at once; the shell also looks every second. A service
without an argv is not held; an image without ``/bin/sh`` ends at once, and is made again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import docker.errors

from envfarm.errors import SandboxStartError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.snapshots import GATE_OPEN
from envfarm.spec.compose import ComposeService

GATE_DIR = "/.envfarm-gate"
_HOLD = (
    f'trap : CONT; while [ ! -e {GATE_DIR}/{GATE_OPEN} ]; do sleep 1 & wait "$!"; done; '
    'kill "$!" 2>/dev/null; exec "$@"'
)


class Hold(NamedTuple):
    """How a sidecar is created held: its entrypoint and command, and its gate's mount."""

    entrypoint: list[str]
    command: list[str]
    bind: str


def gate_volume(env_id: str) -> str:
    return f"envfarm-{env_id}-gate"


def held(service: ComposeService, image_config: dict[str, Any], env_id: str) -> Hold | None:
    """How to hold the service, then run its own argv; None when it has none (the engine
    would refuse it)."""
    image_entry = list(image_config.get("Entrypoint") or [])
    entry = image_entry if service.entrypoint is None else service.entrypoint
    if service.command is not None:
        command = service.command
    else:  # an entrypoint of the compose file's clears the image's command
        command = list(image_config.get("Cmd") or []) if service.entrypoint is None else []
    argv = [*entry, *command]
    if not argv:
        return None
    hold = ["/bin/sh", "-c", _HOLD, "envfarm-hold"]
    return Hold(hold, argv, f"{gate_volume(env_id)}:{GATE_DIR}:ro")


def wake(container_id: str, name: str) -> None:
    """Wake the held sidecar, whose gate is open. SandboxStartError when it is not running."""
    try:
        docker_client().api.kill(container_id, signal="SIGCONT")
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"service {name!r}: could not let it start: {exc}") from exc
