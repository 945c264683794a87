"""Pulls for real, from a registry the test runs on loopback (Debian's ``docker-registry``):
a base pushed there and removed locally is pulled when a task is built FROM it, over plain HTTP
and over TLS with basic auth and the credentials of a Docker config; a missing image is a clear
error naming it; a registry that does not answer is asked once per process."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from envfarm.errors import UnknownBaseImage
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.pull import (
    forget_unreachable,
    pull_image,
    unreachable_registries,
)
from envfarm.sandbox.docker.images.task_images import build_task_image
from tests.docker.registry import docker_config, loopback_registry
from tests.integration.serve_process import free_port

pytestmark = pytest.mark.asyncio(loop_scope="session")

RUN = uuid.uuid4().hex[:10]


@pytest.fixture
def pulling(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The users' order (local, pull, aliases); yields a list of tags to remove afterwards."""
    monkeypatch.setenv("ENVFARM_IMAGE_SOURCES", "local,pull,aliases")
    monkeypatch.delenv("ENVFARM_OFFLINE", raising=False)
    forget_unreachable()
    tags: list[str] = []
    yield tags
    forget_unreachable()
    for tag in tags:
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(tag, force=True)


def _push(base_image: str, reference: str, auth: dict[str, str] | None = None) -> None:
    """Tag the envfarm base as ``reference``, push it, then drop the local tag."""
    repository, _, tag = reference.rpartition(":")
    client = docker_client()
    client.images.get(base_image).tag(repository, tag)
    try:
        events = client.api.push(repository, tag, stream=True, decode=True, auth_config=auth)
        errors = [event["error"] for event in events if "error" in event]
        assert not errors, errors
    finally:
        client.images.remove(reference)
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(reference)


async def _build_from(tmp_path: Path, reference: str, tags: list[str]) -> str:
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    dockerfile = root / "environment" / "Dockerfile"
    dockerfile.write_text(f"FROM {reference}\nRUN echo pulled > /pulled\n")
    built = await build_task_image(
        root, dockerfile, root / "environment", f"registry-{RUN}", uuid.uuid4().hex, timeout=600
    )
    tags.append(built.tag)
    return built.tag


async def test_a_base_pushed_to_a_registry_is_pulled_to_build_a_task(
    tmp_path: Path, base_image: str, pulling: list[str]
) -> None:
    with loopback_registry(tmp_path / "registry") as address:
        reference = f"{address}/envfarm-test/base-{RUN}:1"
        _push(base_image, reference)
        pulling.append(reference)
        tag = await _build_from(tmp_path, reference, pulling)
    client = docker_client()
    assert client.images.get(reference).id == client.images.get(base_image).id
    output = client.containers.run(tag, ["cat", "/pulled"], remove=True, entrypoint=[])
    assert output == b"pulled\n"


async def test_tls_basic_auth_uses_the_credentials_of_the_docker_config(
    tmp_path: Path, base_image: str, pulling: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, password = "envfarm", uuid.uuid4().hex
    work = tmp_path / "registry"
    with loopback_registry(work, tls=True, user=user, password=password) as address:
        reference = f"{address}/envfarm-test/private-{RUN}:1"
        _push(base_image, reference, auth={"username": user, "password": password})
        pulling.append(reference)

        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-credentials"))
        refused = pull_image(reference)
        assert not refused.pulled
        assert refused.message
        assert address not in unreachable_registries()
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client().images.get(reference)

        config = docker_config(tmp_path / "docker-config", address, user, password)
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        await _build_from(tmp_path, reference, pulling)
    assert docker_client().images.get(reference).id == docker_client().images.get(base_image).id


async def test_a_missing_image_is_an_error_naming_it(tmp_path: Path, pulling: list[str]) -> None:
    with loopback_registry(tmp_path / "registry") as address:
        reference = f"{address}/envfarm-test/missing-{RUN}:1"
        with pytest.raises(UnknownBaseImage) as caught:
            await _build_from(tmp_path, reference, pulling)
    message = str(caught.value)
    assert reference in message
    assert "pull:" in message
    assert "not found" in message.lower() or "unknown" in message.lower()
    assert address not in unreachable_registries()


async def test_a_registry_that_does_not_answer_is_asked_once(
    tmp_path: Path, pulling: list[str]
) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    first = pull_image(f"{address}/envfarm-test/a-{RUN}:1")
    assert not first.pulled
    assert address in unreachable_registries()
    second = pull_image(f"{address}/envfarm-test/b-{RUN}:1")
    assert not second.pulled
    assert second.message.startswith(f"registry {address} did not answer")
    assert second.message.endswith(f"({unreachable_registries()[address]})")
    with pytest.raises(UnknownBaseImage, match=f"{address}/envfarm-test/c-{RUN}:1"):
        await _build_from(tmp_path, f"{address}/envfarm-test/c-{RUN}:1", pulling)
