"""The sandbox channel (the in-sandbox helper sandboxd) against the real engine."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from envfarm.errors import SandboxGone
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import HELPER_PATH, attach_helper, ensure_helper

pytestmark = pytest.mark.asyncio(loop_scope="session")

LEFTOVER_SLEEPS = "pgrep -a -x sleep | grep -v infinity || true"


def _sandbox(image: str, **overrides: object) -> DockerSandbox:
    config = {"image": image, "run_id": "test-channel", **overrides}
    return DockerSandbox(DockerSandboxConfig.model_validate(config))


async def _eventually(sandbox: DockerSandbox, command: str, expected: str) -> None:
    """Re-run ``command`` until it prints ``expected`` (pytest's timeout bounds the wait)."""
    while True:
        if (await sandbox.exec(command)).stdout == expected:
            return
        await asyncio.sleep(0.05)


def _channel(sandbox: DockerSandbox) -> Channel:
    assert sandbox.channel is not None
    return sandbox.channel


async def test_helper_is_a_static_binary_cached_on_the_host() -> None:
    first, second = await ensure_helper(), await ensure_helper()
    assert first == second
    content = first.read_bytes()
    assert content[:4] == b"\x7fELF"
    assert b"/lib64/ld-linux" not in content  # no program interpreter: statically linked


async def test_helper_is_bind_mounted_read_only_from_the_cache(base_image: str) -> None:
    helper = await ensure_helper()
    async with _sandbox(base_image) as sandbox:
        mounts = docker_client().api.inspect_container(sandbox.container_id)["Mounts"]
        [mount] = [m for m in mounts if m["Destination"] == HELPER_PATH]
        assert (mount["Source"], mount["RW"]) == (str(helper), False)
        overwrite = await sandbox.exec(f"echo x > {HELPER_PATH}")
        assert overwrite.exit_code != 0


async def test_helper_can_be_uploaded_instead(base_image: str) -> None:
    """The path for an engine that cannot see this machine's files."""
    helper = await ensure_helper()
    client = docker_client()
    container = await asyncio.to_thread(
        client.containers.create,
        base_image,
        command=[HELPER_PATH],
        entrypoint=[],
        init=True,
        stdin_open=True,
        network_mode="none",
        labels={LABEL_RUN: "test-channel"},
    )
    try:
        attached = await asyncio.to_thread(attach_helper, container, helper, upload=True)
        await asyncio.to_thread(container.start)
        channel = await Channel.connect(attached.sock, "uploaded")
        outcome = await channel.exec("ls -l " + HELPER_PATH)
        assert outcome.stdout.startswith(b"-rwxr-xr-x")
        channel.close()
    finally:
        await asyncio.to_thread(container.remove, force=True)


async def test_helper_is_the_main_process_and_exec_basics(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        ps = await sandbox.exec("cat /proc/1/cmdline | tr '\\0' ' '; echo")
        init = ps.stdout.splitlines()[0]
        assert init.split()[0] == HELPER_PATH  # the container's init
        result = await sandbox.exec("echo out; echo err >&2; exit 7")
        assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
        assert not result.timed_out
        ping = await _channel(sandbox).ping()
        assert (ping["version"], ping["pid"]) == (1, 1)


async def test_stdout_and_stderr_stay_separate_and_binary(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        outcome = await _channel(sandbox).exec(
            "printf 'a\\000\\377\\n'; printf 'E\\001\\200' >&2; printf 'b'"
        )
        assert outcome.stdout == b"a\x00\xff\nb"
        assert outcome.stderr == b"E\x01\x80"
        assert outcome.exit_code == 0


async def test_exit_codes_signals_and_setup_failures(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        assert (await sandbox.exec("exit 42")).exit_code == 42
        killed = await sandbox.exec("kill -9 $$")
        assert (killed.exit_code, killed.timed_out) == (137, False)
        signalled = await _channel(sandbox).exec("kill -TERM $$")
        assert (signalled.exit_code, signalled.signal) == (None, 15)
        missing = await sandbox.exec("no-such-program")
        assert missing.exit_code == 127
        assert "not found" in missing.stderr
        argv = await _channel(sandbox).exec(["no-such-program", "x"])
        assert argv.exit_code == 127
        bad_dir = await sandbox.exec("pwd", workdir="/no/such/dir")
        assert bad_dir.exit_code == 126
        assert "/no/such/dir" in bad_dir.stderr
        bad_user = await sandbox.exec("id", user="no-such-user")
        assert bad_user.exit_code == 126
        assert "no-such-user" in bad_user.stderr


async def test_timeout_kills_the_process_tree_background_children_included(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        result = await sandbox.exec(
            "sleep 300 & setsid sleep 301 & bash -c 'sleep 302 & wait' & set -m; sleep 303 & wait",
            timeout=1,
        )
        assert result.timed_out
        assert result.exit_code is None
        assert (await sandbox.exec(LEFTOVER_SLEEPS)).stdout == ""


async def test_exec_returns_when_its_shell_exits_and_background_work_goes_on(
    base_image: str,
) -> None:
    async with _sandbox(base_image) as sandbox:
        result = await sandbox.exec(
            "(sleep 0.5; echo noise; echo done > /tmp/marker) & echo started", timeout=60
        )
        assert not result.timed_out
        assert result.stdout.startswith("started\n")
        # The background job outlives the exec and may still write to its stdout (read and
        # dropped by the helper) without dying of SIGPIPE: it gets to write the marker.
        await _eventually(sandbox, "cat /tmp/marker 2>/dev/null", "done\n")


async def test_output_beyond_the_cap_is_drained_and_flagged(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        outcome = await _channel(sandbox).exec(
            "head -c 3000000 /dev/zero | tr '\\0' o; head -c 10 /dev/zero | tr '\\0' e >&2",
            output_cap=1000,
        )
        assert outcome.exit_code == 0
        assert outcome.stdout == b"o" * 1000
        assert outcome.stdout_truncated
        assert outcome.stderr == b"e" * 10
        assert not outcome.stderr_truncated


async def test_twenty_concurrent_execs_on_one_sandbox(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        execs = [
            asyncio.ensure_future(sandbox.exec(f"sleep 0.3; echo {i}; echo e{i} >&2; exit {i}"))
            for i in range(20)
        ]
        hostname = asyncio.ensure_future(sandbox.read_file("/etc/hostname"))
        await asyncio.gather(*execs, hostname)
        for i, done in enumerate(execs):
            result = done.result()
            assert (result.stdout, result.stderr, result.exit_code) == (f"{i}\n", f"e{i}\n", i)
        assert hostname.result() == b"sandbox\n"


async def test_twenty_megabyte_binary_round_trip(base_image: str) -> None:
    payload = os.urandom(20 * 1024 * 1024)
    async with _sandbox(base_image) as sandbox:
        await sandbox.write_file("/data/blob.bin", payload, mode=0o640)
        check = await sandbox.exec("sha256sum /data/blob.bin; stat -c '%a %s' /data/blob.bin")
        digest, stat = check.stdout.splitlines()
        assert digest.split()[0] == hashlib.sha256(payload).hexdigest()
        assert stat == f"640 {len(payload)}"
        assert await sandbox.read_file("/data/blob.bin") == payload
        leftovers = await sandbox.exec("ls -A /data")
        assert leftovers.stdout == "blob.bin\n"  # the temporary file was renamed, not left


async def test_file_errors_map_to_python_exceptions(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        await sandbox.exec(
            "mkdir -p /srv/dir && echo secret > /srv/secret && chmod 600 /srv/secret"
        )
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file("/srv/missing")
        with pytest.raises(IsADirectoryError):
            await sandbox.read_file("/srv/dir")
        with pytest.raises(PermissionError, match="/srv/secret"):
            await sandbox.read_file("/srv/secret", user="nobody")
        assert await sandbox.read_file("/srv/secret") == b"secret\n"
        with pytest.raises(PermissionError):
            await sandbox.write_file("/root/planted", b"x", user="nobody")
        with pytest.raises(NotADirectoryError):
            await sandbox.write_file("/srv/secret/below", b"x")
        with pytest.raises(IsADirectoryError):
            await sandbox.write_file("/srv/dir", b"x")
        with pytest.raises(OSError, match="not a regular file"):
            await sandbox.read_file("/dev/zero")
        with pytest.raises(OSError, match="unable to find user no-such-user"):
            await sandbox.write_file("/tmp/big", bytes(3 << 20), user="no-such-user")
        assert (await sandbox.exec("ls /root")).stdout == ""


async def test_files_written_as_a_user_belong_to_that_user(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        await sandbox.write_file("/tmp/mine/notes.txt", b"hi", mode=0o600, user="nobody")
        stat = await sandbox.exec("stat -c '%U %a' /tmp/mine /tmp/mine/notes.txt")
        assert stat.stdout.splitlines() == ["nobody 755", "nobody 600"]
        assert await sandbox.read_file("/tmp/mine/notes.txt", user="nobody") == b"hi"


async def test_user_switching(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        nobody = await sandbox.exec('id -u; id -g; echo "$HOME"', user="nobody")
        assert nobody.stdout.splitlines() == ["65534", "65534", "/nonexistent"]
        numeric = await sandbox.exec("id -u; id -g", user="4321")
        assert numeric.stdout.splitlines() == ["4321", "0"]
        with_group = await sandbox.exec("id -un; id -gn", user="nobody:root")
        assert with_group.stdout.splitlines() == ["nobody", "root"]
        caps = await sandbox.exec("grep CapEff /proc/self/status", user="nobody")
        assert caps.stdout.split()[1] == "0000000000000000"
        assert (await sandbox.exec("id -un")).stdout == "root\n"


async def test_env_and_cwd(base_image: str) -> None:
    async with _sandbox(base_image, workdir="/opt/app", env={"FROM_CONFIG": "a"}) as sandbox:
        result = await sandbox.exec(
            'pwd; echo "$FROM_CONFIG $FROM_CALL $LANG"; echo "$PATH"',
            env={"FROM_CALL": "b", "LANG": "C"},
        )
        lines = result.stdout.splitlines()
        assert lines[:2] == ["/opt/app", "a b C"]
        assert "/usr/bin" in lines[2]
        other = await sandbox.exec("pwd; echo ${FROM_CALL:-unset}", workdir="/tmp")
        assert other.stdout.splitlines() == ["/tmp", "unset"]


async def test_cancelling_an_exec_kills_its_command(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        task = asyncio.create_task(sandbox.exec("sleep 300; echo never", timeout=600))
        await _eventually(sandbox, "pgrep -c -x sleep", "1\n")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _eventually(sandbox, LEFTOVER_SLEEPS, "")  # the cancel is asynchronous
        assert (await sandbox.exec("echo alive")).stdout == "alive\n"


async def test_a_killed_helper_is_a_clear_error(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        running = asyncio.ensure_future(sandbox.exec("sleep 30"))
        container = docker_client().containers.get(sandbox.container_id)
        await asyncio.to_thread(container.kill)  # the agent cannot: the helper is init
        with pytest.raises(SandboxGone, match=f"exit code 137; its command helper {HELPER_PATH}"):
            await running
        with pytest.raises(SandboxGone):
            await sandbox.read_file("/etc/hostname")


async def test_network_less_sandbox_works(base_image: str) -> None:
    async with _sandbox(base_image, network=False) as sandbox:
        assert (await sandbox.exec("ls /sys/class/net")).stdout.split() == ["lo"]
        await sandbox.write_file("/tmp/x", b"offline")
        assert await sandbox.read_file("/tmp/x") == b"offline"


async def test_engine_exec_fallback_still_works(base_image: str) -> None:
    async with _sandbox(base_image, channel=False) as sandbox:
        assert sandbox.channel is None
        result = await sandbox.exec("echo out; echo err >&2; exit 3", user="nobody")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        await sandbox.write_file("/tmp/deep/f.bin", b"\x00\xff")
        assert await sandbox.read_file("/tmp/deep/f.bin") == b"\x00\xff"
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file("/tmp/missing")
