"""``Task``: one task as loaded, all the rest of envfarm knows of a task.

``spec.task`` builds it from a Harbor directory (``task.toml``) and ``spec.legacy`` from a legacy
Terminal-Bench one (``task.yaml``, its tests staged elsewhere): both give the same value, so the
code that plans, runs and grades a task never asks which format it was written in. It lives
apart from both loaders because both need it, and the Harbor loader hands a legacy directory to
the legacy one: kept in either, it would tie the two in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfarm.spec.compose import ComposeSpec, is_idle_command
from envfarm.spec.config import TaskConfig
from envfarm.spec.errors_fmt import Issue
from envfarm.spec.steps import TaskStep


@dataclass(frozen=True)
class Task:
    id: str
    """``[task].name`` when set, else the directory name."""
    root: Path
    config: TaskConfig
    instruction: str
    environment_dir: Path
    dockerfile: Path | None
    """The main image's Dockerfile: ``environment/Dockerfile``, or the one the compose file's
    ``main`` service builds; None when the main image is a named one (``docker_image``, or
    ``image:`` of the ``main`` service)."""
    tests_dir: Path
    solution_dir: Path | None
    """``solution/`` when ``solution/solve.sh`` exists."""
    content_hash: str
    compose: ComposeSpec | None = None
    """``environment/docker-compose.yaml`` (main container plus sidecars), when present."""
    unknown: dict[str, Any] = field(default_factory=dict)
    """Keys of ``task.toml`` no model declares (dotted key -> value): ignored, as Harbor does,
    and each one is among ``warnings``."""
    warnings: tuple[Issue, ...] = ()
    """What loading tolerated (unknown keys, an unknown schema, compose keys that have no
    effect here...): printed by ``envfarm run``, lint findings of ``envfarm check``."""
    steps: tuple[TaskStep, ...] = ()
    """A multi-step task's ``[[steps]]`` (``spec.steps``); empty for a single-step task, whose
    ``instruction`` is then the prompt (a multi-step task's ``instruction`` is empty)."""

    @property
    def main_command(self) -> list[str] | None:
        """The compose ``command`` of ``main`` when it is not an idle one (Harbor's own is
        ``["sh", "-c", "sleep infinity"]``): the main container's process, run after the
        entrypoint as Docker would (``main_entrypoint``, else the image's ``ENTRYPOINT``).
        None: nothing of the task's own; the container idles as under Harbor."""
        command = self.compose.main.command if self.compose is not None else None
        return None if command is None or is_idle_command(command) else list(command)

    @property
    def main_entrypoint(self) -> list[str] | None:
        """The compose ``entrypoint`` of ``main`` (None: the image's ``ENTRYPOINT``; ``[]``:
        none at all, as compose's ``entrypoint: []`` means)."""
        entrypoint = self.compose.main.entrypoint if self.compose is not None else None
        return None if entrypoint is None else list(entrypoint)
