"""The labels envfarm puts on what it creates in Docker, and the owner each carries: the reaper
(``reaper.py``) removes what a process that no longer runs on this host left behind."""

from __future__ import annotations

import os
import socket

LABEL_MANAGED = "io.envfarm.managed"
LABEL_KIND = "io.envfarm.kind"
LABEL_RUN = "io.envfarm.run"
LABEL_OWNER = "io.envfarm.owner"
LABEL_TASK = "io.envfarm.task"


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def image_labels(kind: str, **extra: str) -> dict[str, str]:
    """The labels of an image envfarm builds: managed, its ``kind`` (``base``, ``alias``,
    ``task``), and ``extra``."""
    return {LABEL_MANAGED: "true", LABEL_KIND: kind, **extra}
