"""The Docker sandbox against the real engine: lifecycle, exec, files, limits, isolation."""

from __future__ import annotations

import asyncio
import os

import docker
import docker.errors
import pytest

from envfarm.errors import SandboxGone, SandboxStartError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="session")

ALLOWED_CAPS = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"}
CAP_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "NET_RAW": 13,
    "SYS_ADMIN": 21,
    "NET_ADMIN": 12,
    "SYS_PTRACE": 19,
    "MKNOD": 27,
    "AUDIT_WRITE": 29,
    "SETFCAP": 31,
    "NET_BIND_SERVICE": 10,
}


def _sandbox(image: str, **overrides: object) -> DockerSandbox:
    config = {"image": image, "run_id": "test-sandbox", **overrides}
    return DockerSandbox(DockerSandboxConfig.model_validate(config))


def _exists(container_id: str) -> bool:
    try:
        docker_client().containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


async def test_lifecycle_and_teardown_leaves_no_container(base_image: str) -> None:
    sandbox = _sandbox(base_image)
    async with sandbox:
        container_id = sandbox.container_id
        assert _exists(container_id)
        result = await sandbox.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out
    assert not _exists(container_id)
    await sandbox.stop()  # idempotent


async def test_exec_workdir_env_and_user(base_image: str) -> None:
    async with _sandbox(base_image, workdir="/tmp", env={"FROM_CONFIG": "a"}) as sandbox:
        result = await sandbox.exec(
            'pwd; echo "$FROM_CONFIG $FROM_CALL"; id -un', env={"FROM_CALL": "b"}
        )
        assert result.stdout.splitlines() == ["/tmp", "a b", "root"]
        other = await sandbox.exec("pwd; id -un", workdir="/", user="nobody")
        assert other.stdout.splitlines() == ["/", "nobody"]


async def test_exec_timeout_kills_the_whole_process_group(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        result = await sandbox.exec("sleep 60 & sleep 61 & wait", timeout=1)
        assert result.timed_out
        assert result.exit_code is None
        assert result.duration_s < 30
        leftovers = await sandbox.exec("pgrep -x sleep -a | grep -v infinity || true")
        assert leftovers.stdout.strip() == ""


async def test_output_is_capped_not_buffered_without_bound(base_image: str) -> None:
    async with _sandbox(base_image, output_cap=1000) as sandbox:
        result = await sandbox.exec("head -c 5000000 /dev/zero | tr '\\0' x")
        assert result.exit_code == 0
        assert len(result.stdout) == 1000


async def test_file_round_trip_binary_and_nested(base_image: str) -> None:
    payload = os.urandom(3 * 1024 * 1024) + bytes(range(256))
    async with _sandbox(base_image) as sandbox:
        await sandbox.write_file("/work/deep/dir/blob.bin", payload, mode=0o600)
        assert await sandbox.read_file("/work/deep/dir/blob.bin") == payload
        stat = await sandbox.exec(
            "stat -c '%a %U' /work/deep/dir/blob.bin; sha256sum /work/deep/dir/blob.bin | cut -c1-8"
        )
        assert stat.stdout.splitlines()[0] == "600 root"
        tmp_mode = await sandbox.exec("stat -c '%a' /tmp")
        assert tmp_mode.stdout.strip() == "1777"  # writing files never clobbers parents
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file("/work/missing.txt")
        with pytest.raises(IsADirectoryError):
            await sandbox.read_file("/work/deep")


async def test_hardened_defaults(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        status = (await sandbox.exec("cat /proc/self/status")).stdout
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        effective = int(fields["CapEff"].strip(), 16)
        granted = {name for name, bit in CAP_BITS.items() if effective & (1 << bit)}
        assert granted == ALLOWED_CAPS
        assert fields["NoNewPrivs"].strip() == "1"
        interfaces = (await sandbox.exec("ls /sys/class/net")).stdout.split()
        assert interfaces == ["lo"]
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        assert attrs["HostConfig"]["NetworkMode"] == "none"
        assert attrs["HostConfig"]["SecurityOpt"] == ["no-new-privileges"]
        assert not attrs["HostConfig"]["Init"]  # the helper is the init, reaping zombies:
        await sandbox.exec("(sleep 0.1 &) ; sleep 0.5")  # an orphan, re-parented to PID 1
        states = (await sandbox.exec("cat /proc/[0-9]*/stat")).stdout
        assert " Z " not in states, states


async def test_network_when_the_task_asks(base_image: str) -> None:
    async with _sandbox(base_image, network=True) as sandbox:
        interfaces = (await sandbox.exec("ls /sys/class/net")).stdout.split()
        assert "eth0" in interfaces


async def test_memory_limit_is_enforced(base_image: str) -> None:
    async with _sandbox(base_image, memory_mb=64) as sandbox:
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        assert attrs["HostConfig"]["Memory"] == 64 * 1024 * 1024
        assert attrs["HostConfig"]["MemorySwap"] == 64 * 1024 * 1024
        # tail keeps a newline-free line in memory: 256 MiB cannot fit in 64 MiB.
        hog = await sandbox.exec("head -c 268435456 /dev/zero | tail -n 1 | wc -c", timeout=60)
        assert hog.stdout.strip() != "268435456"
        assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_pids_and_cpu_limits_are_enforced(base_image: str) -> None:
    async with _sandbox(base_image, pids_limit=40, cpus=0.5) as sandbox:
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        assert attrs["HostConfig"]["NanoCpus"] == 500_000_000
        assert attrs["HostConfig"]["PidsLimit"] == 40
        # dash gives up on the first failed fork (bash would retry for a long time).
        bomb = await sandbox.exec(
            "dash -c 'for i in $(seq 100); do sleep 20 & done' 2>/dev/null; "
            "pgrep -c -f 'sleep 20'; pkill -f 'sleep 20'; true",
            timeout=60,
        )
        started = int(bomb.stdout.split()[0])
        assert 0 < started < 40


async def test_missing_image_is_a_start_error() -> None:
    sandbox = _sandbox("envfarm-test/does-not-exist:0")
    with pytest.raises(SandboxStartError, match="does not exist"):
        await sandbox.start()


async def test_sandbox_that_dies_mid_episode_is_reported_as_gone(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        await sandbox.exec("kill -TERM 1")
        await asyncio.sleep(0.5)
        with pytest.raises(SandboxGone):
            await sandbox.exec("echo still here?")


async def test_cancellation_still_tears_down(base_image: str) -> None:
    sandbox = _sandbox(base_image)
    started = asyncio.Event()

    async def episode() -> None:
        async with sandbox:
            started.set()
            await sandbox.exec("sleep 30", timeout=40)

    task = asyncio.create_task(episode())
    await started.wait()
    container_id = sandbox.container_id
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _exists(container_id)


async def test_containers_are_labelled_for_the_reaper(base_image: str) -> None:
    labelled = docker_client().containers.list(
        all=True, filters={"label": f"{LABEL_RUN}=test-sandbox"}
    )
    assert labelled == [], "a test left a sandbox behind"


def _run_containers(run_id: str) -> list[dict[str, object]]:
    found = docker_client().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    return list(found)


async def test_clean_room_created_ahead_is_fresh_and_removed(base_image: str) -> None:
    run_id = f"test-ahead-{os.getpid()}"
    fresh = {"clean_room_network": False, "restart_clean_room": False}
    sandbox = _sandbox(base_image, run_id=run_id, **fresh)
    async with sandbox:
        await sandbox.exec("echo agent > /tmp/left-by-agent")
        for _ in range(200):  # the clean room's container is created, not started
            states = sorted(str(c["State"]) for c in _run_containers(run_id))
            if states == ["created", "running"]:
                break
            await asyncio.sleep(0.05)
        assert states == ["created", "running"]
        await sandbox.prepare_fresh_verifier(network=False)
        clean = await sandbox.fresh_verifier(network=False)
        assert isinstance(clean, DockerSandbox)
        assert clean.container_id != sandbox.container_id
        result = await clean.exec("cat /tmp/left-by-agent || echo fresh")
        assert result.stdout.strip().endswith("fresh")
    assert _run_containers(run_id) == []


async def test_clean_room_created_ahead_but_never_started_is_removed(base_image: str) -> None:
    run_id = f"test-unused-{os.getpid()}"
    fresh = {"clean_room_network": False, "restart_clean_room": False}
    sandbox = _sandbox(base_image, run_id=run_id, **fresh)
    async with sandbox:
        await sandbox.exec("true")
        await sandbox.prepare_fresh_verifier(
            network=True
        )  # another network: the one ahead is unused
        clean = await sandbox.fresh_verifier(network=True)
        assert (await clean.exec("echo ok")).stdout == "ok\n"
    assert _run_containers(run_id) == []
    other = _sandbox(base_image, run_id=f"{run_id}-b", **fresh)
    async with other:  # never graded at all
        await other.exec("true")
    assert _run_containers(f"{run_id}-b") == []
