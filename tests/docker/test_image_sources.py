"""Where bases come from, on the real engine: a local image wins over the offline substitute (a
test-owned name the normaliser maps onto a public one, never a public name retagged), and the
Debian 13 substitutes build: Python 3.13 on trixie, and uv's image for ``COPY --from``."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.recipes import recipe_image_tag
from envfarm.sandbox.docker.images.task_images import (
    build_task_image,
    ensure_recipe_image,
    prebuilt_image,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

RUN = uuid.uuid4().hex[:10]


@pytest.fixture
def removed_after() -> Iterator[list[str]]:
    tags: list[str] = []
    yield tags
    for tag in tags:
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(tag, force=True)


def _run(image: str, command: str) -> str:
    output = docker_client().containers.run(
        image, ["sh", "-c", command], remove=True, entrypoint=[]
    )
    return bytes(output).decode()


async def test_a_local_image_wins_over_the_substitute(
    tmp_path: Path, base_image: str, monkeypatch: pytest.MonkeyPatch, removed_after: list[str]
) -> None:
    prefix = f"envfarm-test-bogus-{RUN}/"
    bogus = f"{prefix}python:3.11-slim"  # normalised to python:3.11-slim by the table below
    table = tmp_path / "aliases.toml"
    table.write_text(f'mirror_prefixes = ["{prefix}"]\n')
    monkeypatch.setenv("ENVFARM_ALIASES", str(table))
    monkeypatch.setenv("ENVFARM_IMAGE_SOURCES", "local,aliases")
    substitute = recipe_image_tag("python-slim")

    docker_client().images.get(base_image).tag(f"{prefix}python", "3.11-slim")
    removed_after.append(bogus)
    local = await prebuilt_image(bogus, where="task.toml")
    assert local.tag == bogus
    assert local.image_id == docker_client().images.get(base_image).id
    assert local.warnings == []

    monkeypatch.setenv("ENVFARM_IMAGE_SOURCES", "aliases,local")
    assert (await prebuilt_image(bogus, where="task.toml")).tag == substitute

    monkeypatch.setenv("ENVFARM_IMAGE_SOURCES", "local,aliases")
    docker_client().images.remove(bogus)
    assert (await prebuilt_image(bogus, where="task.toml")).tag == substitute


async def test_python_313_on_trixie_with_uv_copied_from_its_image(
    tmp_path: Path, removed_after: list[str]
) -> None:
    python = await ensure_recipe_image("python-slim-trixie")
    assert "Python 3.13." in _run(python.tag, "python --version")
    assert "VERSION_CODENAME=trixie" in _run(python.tag, "cat /etc/os-release")
    sources = _run(python.tag, "cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true")
    assert "bookworm" not in sources

    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    dockerfile = root / "environment" / "Dockerfile"
    dockerfile.write_text(
        "FROM public.ecr.aws/docker/library/python:3.13-slim-bookworm\n"
        "COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /bin/\n"
        "RUN uv --version && uvx --version\n"
    )
    built = await build_task_image(
        root, dockerfile, root / "environment", f"uv-{RUN}", uuid.uuid4().hex, timeout=900
    )
    removed_after.append(built.tag)
    assert any("Debian 13" in warning for warning in built.warnings)
    assert any("ghcr.io/astral-sh/uv:0.8.15" in warning for warning in built.warnings)
    assert _run(built.tag, "uv --version").startswith("uv ")
    assert "Python 3.13." in _run(built.tag, "uv run --no-project python --version")
