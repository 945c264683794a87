"""The build output travels with the prepared image, also when a later run finds it built."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import load_task
from tests.docker.grading_tasks import make_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_build_log_is_kept_and_found_again_for_a_cached_image(tmp_path: Path) -> None:
    root = tmp_path / "logged"
    make_task(root)
    marker = f"envfarm-build-log-{uuid.uuid4().hex}"
    with (root / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write(f"RUN echo {marker}\n")
    task = load_task(root)

    built = await DockerBackend().prepare(sandbox_spec(task))
    assert not built.cached
    assert built.build_log is not None
    assert marker in built.build_log

    again = await DockerBackend().prepare(sandbox_spec(task))
    assert again.cached
    assert again.build_log == built.build_log
