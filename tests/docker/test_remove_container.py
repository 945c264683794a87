"""Removing a container that another call is already removing is not an error: the compose
route helper removes itself on a thread while the environment's sweep may reach it too."""

from __future__ import annotations

import asyncio

import docker.errors
import pytest

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.services import remove_container


async def test_two_removals_at_once_both_succeed(base_image: str) -> None:
    client = docker_client()
    container = client.containers.create(base_image, command=["sleep", "30"], entrypoint=[])
    container_id = str(container.id)
    try:
        container.start()
        await asyncio.gather(*(asyncio.to_thread(remove_container, container_id) for _ in range(4)))
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container_id)
    finally:
        remove_container(container_id)
