"""An optional backend capability: the task's image with an installed agent on top.

The agent is installed by ``AgentLayer.script`` (run as root at build time, with the build's
network) under ``AGENT_DIR`` as an image layer of its own, built FROM the task's image and
cached under a key of the image and the script, so a second job with the same agent version
reuses it. What does not depend on the task (a virtualenv of pip packages) is installed once
per base image and copied into each task's layer, checked there and redone if the task's image
differs (its own Python). Its ``npm`` packages, if any, are installed once per package list on
envfarm's own Node image and copied in before the script runs: the task's image needs no Node,
so such a package must run without it (Codex CLI's native binary does). The directory is
envfarm's, not the task's: grading excludes it from tamper snapshots and the clean-room carry.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod

from pydantic import BaseModel, ConfigDict

from envfarm.errors import SandboxError
from envfarm.sandbox.base import PreparedImage, SandboxBackend

AGENT_DIR = "/opt/envfarm/agent"
MISSING_RUNTIME_EXIT = 97
"""The exit status of an install script that found no runtime it can use (bad input)."""


class AgentLayer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    script: str
    """A POSIX shell script; exiting ``MISSING_RUNTIME_EXIT`` means the image cannot run it."""
    npm: list[str] = []
    """npm package specs installed into ``AGENT_DIR/node_modules`` before ``script`` runs."""
    shared_script: str = ""
    """Run once per base image (the one the task's image is built FROM), where a backend
    knows it, and its ``AGENT_DIR`` copied in before ``script`` runs, which must redo what a
    copy does not make work in the task's image."""

    def key(self, image: PreparedImage) -> str:
        text = (
            f"{image.image_id or image.tag}\n{self.name}\n{self.version}\n{self.script}"
            + "".join(f"\nnpm {package}" for package in self.npm)
            + f"\n{self.shared_script}"
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class AgentImages(ABC):
    @abstractmethod
    async def with_agent(self, image: PreparedImage, layer: AgentLayer) -> PreparedImage:
        """``image`` with ``layer`` installed (built once, then cached); ImageError on a failed
        build (infrastructure: the caller retries), AgentInstallError on a missing runtime."""


def agent_images(backend: SandboxBackend) -> AgentImages:
    if isinstance(backend, AgentImages):
        return backend
    raise SandboxError(f"the {backend.name} backend cannot install agents into task images")
