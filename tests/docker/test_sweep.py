"""The helper's sweep on the real engine (``images/sandboxd/sweep.c``): the helper is the
container's init, which the agent can neither kill nor trace; it kills every other process,
whatever the agent did to hide one; it names the tmpfs mounts a restart would empty, and what
only a restart resets sends grading to one."""

from __future__ import annotations

import os

import pytest

from envfarm.grading.cleanroom.carry import container_clock
from envfarm.grading.cleanroom.inplace import SWEEP_MARGIN_S
from envfarm.sandbox.base import Swept
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROCESSES = "for p in /proc/[0-9]*; do echo ${p#/proc/} $(tr '\\0' ' ' < $p/cmdline); done"


def _sandbox(image: str, name: str, verifier_network: bool | None = None) -> DockerSandbox:
    run_id = f"test-sweep-{name}-{os.getpid()}"
    config = DockerSandboxConfig(
        image=image, run_id=run_id, clean_room_network=False, verifier_network=verifier_network
    )
    return DockerSandbox(config)


async def _others(sandbox: DockerSandbox) -> list[str]:
    """The processes but the helper and the listing's own shell."""
    listed = await sandbox.exec(f"echo self $$; {PROCESSES}")
    lines = listed.stdout.splitlines()
    own = lines[0].split()[1]
    return [line for line in lines[1:] if line.split()[0] not in ("1", own)]


async def test_the_sweep_kills_every_process_but_the_helper(base_image: str) -> None:
    async with _sandbox(base_image, "kill") as sandbox:
        since = await container_clock(sandbox) - SWEEP_MARGIN_S
        await sandbox.exec(
            "nohup sh -c 'while :; do sleep 0.05; done' >/dev/null 2>&1 &"
            " setsid sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 &"
            " (sh -c 'sleep 1000' & ) ;"  # an orphan, re-parented to init at once
            " sleep 1000 & kill -STOP $! ;"
            " su -s /bin/sh nobody -c 'sleep 1000 &' ;"
            " trap '' TERM HUP INT; true"
        )
        assert len(await _others(sandbox)) >= 6
        swept = await sandbox.end_processes(since=since)
        assert isinstance(swept, Swept), swept
        assert await _others(sandbox) == []
        assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_the_agent_can_neither_kill_nor_trace_the_helper(base_image: str) -> None:
    async with _sandbox(base_image, "trace") as sandbox:
        helper = await sandbox.exec("tr '\\0' ' ' < /proc/1/cmdline")
        assert "sandboxd" in helper.stdout
        await sandbox.exec("kill -KILL 1; kill -STOP 1; kill -SEGV 1")
        probes = ("readlink /proc/1/fd/1", "exec 3</proc/1/fd/0", "readlink /proc/1/exe")
        for probe in (*probes, "head -c1 /proc/1/mem", "cat /proc/1/environ"):
            result = await sandbox.exec(probe)
            assert result.exit_code != 0, (probe, result.stdout)
        assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_the_sweep_names_the_tmpfs_a_restart_would_empty(base_image: str) -> None:
    async with _sandbox(base_image, "tmpfs") as sandbox:
        since = await container_clock(sandbox) - SWEEP_MARGIN_S
        await sandbox.exec(
            "echo planted > /dev/shm/reward && mkdir /dev/shm/d && touch /dev/shm/d/f"
        )
        swept = await sandbox.end_processes(since=since)
        assert isinstance(swept, Swept), swept
        assert "/dev/shm" in swept.tmpfs
        assert not [m for m in swept.tmpfs if m == "/dev" or m.startswith(("/proc", "/sys"))]
        await sandbox.remove_files([], contents=swept.tmpfs)
        listed = await sandbox.exec("ls -A /dev/shm; test -d /dev/shm && echo kept")
        assert listed.stdout == "kept\n"


@pytest.mark.parametrize(
    ("planted", "reason"),
    [
        ("touch /dev/planted", "changed /dev"),
        ("echo '10.0.0.9 db' >> /etc/hosts", "changed /etc/hosts"),
        ("ipcmk -M 4096 >/dev/null", "System V IPC objects"),
    ],
)
async def test_what_only_a_restart_resets_sends_grading_to_one(
    base_image: str, planted: str, reason: str
) -> None:
    async with _sandbox(base_image, "residue") as sandbox:
        since = await container_clock(sandbox) - SWEEP_MARGIN_S
        untouched = await sandbox.end_processes(since=since)
        assert isinstance(untouched, Swept), untouched
        done = await sandbox.exec(planted)
        assert done.exit_code == 0, done.stderr
        swept = await sandbox.end_processes(since=since)
        assert isinstance(swept, str)
        assert reason in swept


async def test_the_verifier_phase_network_is_joined_after_the_sweep(base_image: str) -> None:
    async with _sandbox(base_image, "network", verifier_network=True) as sandbox:
        assert "00000000" not in (await sandbox.exec("cat /proc/net/route")).stdout
        since = await container_clock(sandbox) - SWEEP_MARGIN_S
        swept = await sandbox.end_processes(since=since)
        assert isinstance(swept, Swept), swept
        assert "00000000" not in (await sandbox.exec("cat /proc/net/route")).stdout
        await sandbox.enter_verifier_phase(network=True)
        assert "00000000" in (await sandbox.exec("cat /proc/net/route")).stdout  # a default route
