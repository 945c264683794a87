"""Fixtures the Docker tests share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker.errors
import pytest

from envfarm.sandbox.docker.client import docker_client


@pytest.fixture(scope="module")
def created_tags() -> Iterator[list[str]]:
    """Image tags a module's tests build; removed when the module is done."""
    tags: list[str] = []
    yield tags
    for tag in reversed(tags):
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(tag, force=True)
