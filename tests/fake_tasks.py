"""A minimal task for episodes on the fake backend: graded in the agent's own sandbox (a fake
sandbox has no files to carry into a clean room), with a test script and a solution that do
nothing the fake needs to run; and task directories packed as a RolloutJob's ConfigMap holds
them (``task_archive``)."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

from envfarm.spec.task import Task, load_task


def shared_task(root: Path) -> Task:
    for sub in ("environment", "tests", "solution"):
        (root / sub).mkdir(parents=True)
    (root / "task.toml").write_text(
        '[verifier]\nenvironment_mode = "shared"\n[environment]\nworkdir = "/app"\n'
    )
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "solution" / "solve.sh").write_text("true\n")
    return load_task(root)


def task_archive(*roots: Path) -> str:
    """The task directories as a base64 gzipped tar, each under its own name (the
    ``binaryData`` of a RolloutJob's ``spec.tasks.configMap``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for root in roots:
            tar.add(root, arcname=root.name)
    return base64.b64encode(buffer.getvalue()).decode()
