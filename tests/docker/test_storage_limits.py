"""Disk limits against the real engine: a disk filler stops at its sandbox's limit while a
neighbour sandbox and the host keep writing.

An engine whose storage driver cannot enforce a limit (overlay2 on ext4) fails this test rather
than skipping it: ``scripts/setup``, run before dockerd first starts (as CI does), gives the
engine a btrfs data root with quotas (docs/sandbox.md, "Disk limits").
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.excess import GRADING_RESERVE_MB
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER, owner_label
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.storage import REMEDY, storage_support

pytestmark = pytest.mark.asyncio(loop_scope="session")

LIMIT_MB = 256
FULL = ("Disk quota exceeded", "No space left on device")


def _sandbox(image: str, storage_mb: int | None) -> DockerSandbox:
    config = DockerSandboxConfig(image=image, storage_mb=storage_mb, run_id="test-storage")
    return DockerSandbox(config)


def _require_enforcing_engine(image: str) -> None:
    labels = {LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()}
    support = storage_support(image, labels)
    if not support.enforced:
        pytest.fail(f"this Docker engine cannot limit a sandbox's disk: {support.reason}; {REMEDY}")


async def test_disk_filler_hits_its_limit_while_neighbour_and_host_keep_writing(
    base_image: str, tmp_path: Path
) -> None:
    await asyncio.to_thread(_require_enforcing_engine, base_image)
    filler, neighbour = _sandbox(base_image, LIMIT_MB), _sandbox(base_image, None)
    async with filler, neighbour:
        attrs = docker_client().api.inspect_container(filler.container_id)
        size = f"{LIMIT_MB + GRADING_RESERVE_MB}M"  # the tests' room, held by the helper
        assert attrs["HostConfig"]["StorageOpt"] == {"size": size}

        fill = await filler.exec("dd if=/dev/zero of=/big bs=1M", timeout=120)
        assert fill.exit_code != 0
        assert any(message in fill.stderr for message in FULL), fill.stderr
        written = int((await filler.exec("stat -c %s /big")).stdout)
        assert 0 < written <= LIMIT_MB * 1024 * 1024

        # Anywhere in the container's file system, not just where the filler wrote.
        elsewhere = await filler.exec("head -c 8388608 /dev/zero > /usr/local/more", timeout=60)
        assert elsewhere.exit_code != 0
        assert any(message in elsewhere.stderr for message in FULL), elsewhere.stderr

        neighbour_write = await neighbour.exec(
            "head -c 134217728 /dev/zero > /big && stat -c %s /big", timeout=120
        )
        assert (neighbour_write.exit_code, neighbour_write.stdout) == (0, "134217728\n")
        (tmp_path / "host").write_bytes(b"\0" * (16 * 1024 * 1024))
        assert (tmp_path / "host").stat().st_size == 16 * 1024 * 1024

        # The filler's sandbox still works, and space it frees can be written again.
        freed = await filler.exec(
            "rm /big && sync && head -c 16777216 /dev/zero > /again && echo ok"
        )
        assert (freed.exit_code, freed.stdout) == (0, "ok\n")
