"""A minimal task for episodes on the fake backend: graded in the agent's own sandbox (a fake
sandbox has no files to carry into a clean room), with a test script and a solution that do
nothing the fake needs to run."""

from __future__ import annotations

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
