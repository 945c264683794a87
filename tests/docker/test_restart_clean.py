"""``DockerSandbox.restart_clean`` and the helper's own file system work on the real engine: the
restarted container keeps the agent's files and nothing it left running, takes the verifier
phase's network, and the helper lists and removes files without the image's tools."""

from __future__ import annotations

import os

import pytest

from envfarm.grading.cleanroom.carry import parse_entries
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _sandbox(image: str, run_id: str) -> DockerSandbox:
    config = DockerSandboxConfig(image=image, run_id=run_id, clean_room_network=True)
    return DockerSandbox(config)


async def test_a_restart_keeps_the_files_and_nothing_that_ran(base_image: str) -> None:
    run_id = f"test-restart-{os.getpid()}"
    async with _sandbox(base_image, run_id) as sandbox:
        assert sandbox.grades_in_place()
        await sandbox.exec("echo kept > /etc/agent-file")
        await sandbox.exec("nohup sh -c 'while :; do date > /tmp/ticks; sleep 0.1; done' &")
        await sandbox.exec("echo planted > /tests/x 2>/dev/null || true")
        before = await sandbox.exec("cat /proc/1/stat")
        await sandbox.restart_clean(network=True)
        assert (await sandbox.exec("cat /etc/agent-file")).stdout == "kept\n"
        processes = await sandbox.exec(
            "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done"
        )
        assert "while" not in processes.stdout, processes.stdout
        assert (await sandbox.exec("cat /proc/1/stat")).stdout != before.stdout
        routes = await sandbox.exec("cat /proc/net/route")
        assert "00000000" in routes.stdout  # a default route: the verifier phase's network
        assert docker_client().containers.get(sandbox.container_id).attrs["State"]["Running"]
    found = docker_client().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    assert list(found) == []


async def test_the_helper_lists_and_removes_without_the_images_tools(base_image: str) -> None:
    async with _sandbox(base_image, f"test-walk-{os.getpid()}") as sandbox:
        await sandbox.exec(
            "mkdir -p /srv/a/b && echo x > /srv/a/b/f && ln -s /etc /srv/a/link "
            "&& mkfifo /srv/a/pipe && chmod -x /usr/bin/find /bin/rm /usr/bin/rm 2>/dev/null; true"
        )
        entries = parse_entries(await sandbox.walk_files())
        assert entries["srv/a/b/f"][0] == "f"
        assert entries["srv/a/link"][0] == "l"
        assert entries["srv/a/pipe"][0] == "p"
        assert entries["etc/passwd"][0] == "f"
        assert not [p for p in entries if p.startswith(("proc/", "sys/", "dev/"))]
        await sandbox.remove_files(["/srv/a", "/srv/missing"])
        after = parse_entries(await sandbox.walk_files())
        assert "srv" in after
        assert not [p for p in after if p.startswith("srv/")]
        assert after["etc/passwd"] == entries["etc/passwd"]  # the link was not followed
