"""Image builds against the real Docker engine, with no registry: base, aliases, task images."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from envfarm.errors import ImageError, UnknownBaseImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.hostconfig import read_host_config
from envfarm.sandbox.docker.images.task_images import (
    BuiltImage,
    build_task_image,
    ensure_base_image,
    ensure_recipe_image,
    prebuilt_image,
)
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_TASK

pytestmark = pytest.mark.docker

RUN_ID = uuid.uuid4().hex[:12]
"""Task images of this run get fresh tags, so 'built' vs 'cached' is known in advance."""


def _task(tmp_path: Path, dockerfile: str, name: str = "t") -> Path:
    root = tmp_path / name
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "environment" / "hello.txt").write_text("hello from the context\n")
    return root


async def _build(
    root: Path,
    task_id: str,
    created: list[str],
    content_hash: str | None = None,
    timeout: float = 600.0,
) -> BuiltImage:
    built = await build_task_image(
        root,
        root / "environment" / "Dockerfile",
        root / "environment",
        task_id,
        content_hash or uuid.uuid4().hex,
        timeout=timeout,
    )
    created.append(built.tag)
    return built


def _run(image: str, *command: str) -> str:
    output = docker_client().containers.run(image, list(command), remove=True)
    return output.decode()


async def test_base_image_is_built_once_and_reused(base_image: str) -> None:
    again = await ensure_base_image()
    assert again.cached
    assert again.tag == base_image
    image = docker_client().images.get(base_image)
    assert image.id == again.image_id
    assert image.labels[LABEL_MANAGED] == "true"
    assert image.labels[LABEL_KIND] == "base"


async def test_base_image_inherits_the_host_ca_and_pip_config(base_image: str) -> None:
    pip_conf = _run(base_image, "cat", "/etc/pip.conf")
    assert "cert = /etc/ssl/certs/ca-certificates.crt" in pip_conf
    assert "file://" not in pip_conf
    host_cas = read_host_config().ca_certs
    listing = _run(base_image, "find", "/usr/local/share/ca-certificates", "-name", "*.crt")
    assert sorted(listing.split()) == sorted(
        f"/usr/local/share/ca-certificates/{name}" for name in host_cas
    )
    # Checked inside the container: a container's log can lose its tail when read right
    # after exit, and the host's CAs come last in the bundle.
    for pem in host_cas.values():
        line = pem.strip().splitlines()[1]
        found = _run(base_image, "grep", "-cF", line, "/etc/ssl/certs/ca-certificates.crt")
        assert found.strip() == "1", "update-ca-certificates ran"


async def test_python_alias_image_runs_python_and_pip(base_image: str) -> None:
    built = await ensure_recipe_image("python-slim")
    assert docker_client().images.get(built.tag).labels[LABEL_KIND] == "alias"
    assert _run(built.tag, "python", "--version").startswith("Python 3.11")
    assert "python 3.11" in _run(built.tag, "pip", "--version")
    again = await ensure_recipe_image("python-slim")
    assert again.cached
    assert again.image_id == built.image_id


async def test_pip_install_in_a_task_build_reaches_the_index(
    tmp_path: Path, created_tags: list[str]
) -> None:
    dockerfile = (
        "FROM python:3.11-slim\nCOPY hello.txt /hello.txt\nRUN pip install --no-cache-dir six\n"
    )
    root = _task(tmp_path, dockerfile)
    built = await _build(root, f"pip-{RUN_ID}", created_tags)
    assert not built.cached
    assert built.warnings == []
    assert _run(built.tag, "python", "-c", "import six; print(six.__name__)").strip() == "six"
    assert _run(built.tag, "cat", "/hello.txt") == "hello from the context\n"
    labels = docker_client().images.get(built.tag).labels
    assert labels[LABEL_KIND] == "task"
    assert labels[LABEL_TASK] == f"pip-{RUN_ID}"


async def test_same_tag_is_built_once_and_then_cached(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = _task(tmp_path, "FROM debian:bookworm-slim\nRUN echo built > /marker\n")
    content_hash = uuid.uuid4().hex
    first, second = await asyncio.gather(
        _build(root, f"twice-{RUN_ID}", created_tags, content_hash=content_hash),
        _build(root, f"twice-{RUN_ID}", created_tags, content_hash=content_hash),
    )
    assert sorted([first.cached, second.cached]) == [False, True]
    assert first.image_id == second.image_id
    assert first.tag == f"envfarm-task/twice-{RUN_ID}:{content_hash[:16]}"


async def test_python_312_builds_with_a_version_warning(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = _task(tmp_path, "FROM python:3.12-slim\nRUN python --version\n")
    built = await _build(root, f"py312-{RUN_ID}", created_tags)
    assert len(built.warnings) == 1
    assert "python:3.12-slim" in built.warnings[0]


async def test_an_existing_local_image_is_used_as_is(
    tmp_path: Path, created_tags: list[str], base_image: str
) -> None:
    first_root = _task(tmp_path, "FROM debian:12\nRUN echo one > /one\n", "a")
    first = await _build(first_root, f"a-{RUN_ID}", created_tags)
    second_root = _task(tmp_path, f"FROM {first.tag}\nRUN cat /one\n", "b")
    second = await _build(second_root, f"b-{RUN_ID}", created_tags)
    assert _run(second.tag, "cat", "/one") == "one\n"
    prebuilt = await prebuilt_image(first.tag, where="task.toml")
    assert prebuilt.tag == first.tag
    assert prebuilt.image_id == first.image_id


async def test_a_cached_task_image_is_rebuilt_when_its_base_changes(
    tmp_path: Path, created_tags: list[str], base_image: str
) -> None:
    local_base = f"envfarm-test/moving-base:{RUN_ID}"
    created_tags.append(local_base)
    client = docker_client()
    client.images.get(base_image).tag(local_base)
    root = _task(tmp_path, f"FROM {local_base}\nRUN true\n")
    content_hash = uuid.uuid4().hex
    first = await _build(root, f"moving-{RUN_ID}", created_tags, content_hash=content_hash)
    created_tags.append(first.image_id)
    assert (await _build(root, f"moving-{RUN_ID}", created_tags, content_hash=content_hash)).cached
    python_slim = await ensure_recipe_image("python-slim")
    client.images.get(python_slim.tag).tag(local_base)
    rebuilt = await _build(root, f"moving-{RUN_ID}", created_tags, content_hash=content_hash)
    assert not rebuilt.cached
    assert rebuilt.image_id != first.image_id


async def test_prebuilt_docker_image_resolves_through_the_alias_table() -> None:
    built = await prebuilt_image("docker.io/library/python:3.11-slim", where="t/task.toml")
    assert built.tag == (await ensure_recipe_image("python-slim")).tag
    with pytest.raises(UnknownBaseImage, match=r"t/task\.toml.*ghcr\.io/foo/bar"):
        await prebuilt_image("ghcr.io/foo/bar:1", where="t/task.toml")


async def test_a_base_without_a_substitute_fails_naming_it(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = _task(tmp_path, "FROM alpine:3.22\nRUN true\n")
    with pytest.raises(UnknownBaseImage) as info:
        await _build(root, f"alpine-{RUN_ID}", created_tags)
    message = str(info.value)
    assert "alpine:3.22" in message
    assert str(root / "environment" / "Dockerfile") in message
    assert "docs/images.md" in message


async def test_a_failing_run_reports_the_task_and_the_output_tail(
    tmp_path: Path, created_tags: list[str]
) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        "RUN for i in $(seq 1 50); do echo line-$i; done; echo marker-before-failure; exit 3\n"
    )
    root = _task(tmp_path, dockerfile)
    with pytest.raises(ImageError) as info:
        await _build(root, f"fails-{RUN_ID}", created_tags)
    message = str(info.value)
    assert f"task fails-{RUN_ID}" in message
    assert "marker-before-failure" in message
    assert "line-50" in message
    assert "line-5\n" not in message, "only the tail of the output is kept"
    assert "returned a non-zero code: 3" in message


async def test_a_build_past_its_timeout_fails(tmp_path: Path, created_tags: list[str]) -> None:
    root = _task(tmp_path, "FROM debian:bookworm-slim\nRUN echo started; sleep 120\n")
    with pytest.raises(ImageError, match="did not finish within 3 s"):
        await _build(root, f"slow-{RUN_ID}", created_tags, timeout=3)


async def test_a_compose_build_target_builds_that_stage(
    tmp_path: Path, created_tags: list[str]
) -> None:
    stages = (
        "FROM debian:bookworm-slim AS tools\nRUN echo tools > /stage\n"
        "FROM tools AS last\nRUN echo last > /stage\n"
    )
    root = _task(tmp_path, stages)
    built = await build_task_image(
        root,
        root / "environment" / "Dockerfile",
        root / "environment",
        f"target-{RUN_ID}",
        uuid.uuid4().hex,
        timeout=600.0,
        target="tools",
    )
    created_tags.append(built.tag)
    assert _run(built.tag, "cat", "/stage") == "tools\n"


async def test_run_mounts_build_on_the_classic_builder(
    tmp_path: Path, created_tags: list[str]
) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim AS tools\nRUN echo tools > /hi\n"
        "FROM debian:bookworm-slim\nRUN mkdir -p /root/.cache && echo kept > /root/.cache/old\n"
        "RUN --mount=type=cache,target=/root/.cache \\\n"
        "    --mount=type=bind,from=tools,source=/hi,target=/tmp/hi \\\n"
        "    --mount=type=bind,source=hello.txt,target=/etc/hello.txt \\\n"
        "    ls /root/.cache | wc -l > /cache-entries; \\\n"
        "    cat /tmp/hi /etc/hello.txt > /copied # note\n"
    )
    built = await _build(_task(tmp_path, dockerfile), f"mounts-{RUN_ID}", created_tags)
    assert any("rewritten for the classic builder" in warning for warning in built.warnings)
    assert _run(built.tag, "cat", "/copied") == "tools\nhello from the context\n"
    assert _run(built.tag, "cat", "/cache-entries") == "0\n"
    listing = _run(built.tag, "sh", "-c", "ls -a /tmp /etc/hello.txt /.envfarm-mounts 2>&1; true")
    assert "No such file" in listing
    assert "hi" not in listing.split()
    assert _run(built.tag, "cat", "/root/.cache/old") == "kept\n"
