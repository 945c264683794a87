"""Shared fixtures. Tests that need Docker use the real engine and fail (not skip) without it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from envfarm.policy.server import PolicyServer
from envfarm.testing.scripted import ScriptedResponder

REPO = Path(__file__).resolve().parent.parent

# Hermetic bases: a public name (python:3.11-slim) resolves to envfarm's recipe whatever the
# shared engine holds under it, and nothing is pulled (tests/docker/test_registry.py and
# test_image_sources.py set their own order).
os.environ.setdefault("ENVFARM_IMAGE_SOURCES", "aliases,local")

pytest_plugins = ("tests.store_fixtures",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "docker" in parts or "e2e" in parts:
            item.add_marker(pytest.mark.docker)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def base_image() -> str:
    """The envfarm base image (debootstrap + docker import), built once and reused."""
    from envfarm.sandbox.docker.images.task_images import ensure_base_image

    return (await ensure_base_image()).tag


@pytest_asyncio.fixture(loop_scope="session")
async def scripted_server() -> AsyncIterator[tuple[ScriptedResponder, PolicyServer]]:
    """An OpenAI-compatible server on loopback replaying a script the test fills in."""
    responder = ScriptedResponder([])
    async with PolicyServer(responder) as server:
        yield responder, server
