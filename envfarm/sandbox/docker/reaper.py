"""Leak-proof teardown across crashes: remove sandboxes whose owning process is gone.

Every sandbox container is labelled with its owner as ``host:pid``. A run that was SIGKILLed
cannot clean up after itself, so each new run first removes the containers that this host's
dead processes left behind. Containers owned by live processes, or by other hosts sharing the
engine, are left alone.
"""

from __future__ import annotations

import os
import socket

import docker.errors

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.sandbox import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans() -> list[str]:
    """Remove this host's envfarm sandboxes whose owner process has exited; return their ids."""
    host = socket.gethostname()
    removed: list[str] = []
    containers = docker_client().containers.list(
        all=True, filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_KIND}=sandbox"]}
    )
    for container in containers:
        owner_host, _, pid = container.labels.get(LABEL_OWNER, "").rpartition(":")
        if owner_host != host or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue
        removed.append(str(container.id))
    return removed
