"""The workstation profile from inside a sandbox: what a command sees, against the default."""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.sandbox.docker.images.workstation_layer import build_workstation_image
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.settings import WORKSTATION_USER

pytestmark = pytest.mark.asyncio(loop_scope="session")

LOOK = r"""
python3 - <<'PY'
import json, os, socket
def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError as exc:
        return f"<{exc.strerror}>"
print(json.dumps({
    "hostname": socket.gethostname(),
    "dockerenv": os.path.exists("/.dockerenv"),
    "cgroup": read("/proc/self/cgroup"),
    "init": read("/proc/1/cmdline").replace("\0", " ").strip(),
    "comm": read("/proc/1/comm").strip(),
    "mounts": read("/proc/mounts"),
    "env": {k: os.environ.get(k) for k in ("USER", "SHELL", "TERM", "LANG", "INIT_OPTS")},
    "grading": [p for p in ("/tests", "/logs", "/solution", "/.envfarm") if os.path.exists(p)],
}))
PY
"""


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def python_image() -> str:
    """The python:3.11-slim substitute."""
    return (await ensure_recipe_image("python-slim")).tag


async def look(image: str, realism: str) -> dict[str, object]:
    config = DockerSandboxConfig(
        image=image, storage_mb=1024, run_id="test-workstation", realism=realism
    )
    async with DockerSandbox(config) as sandbox:
        result = await sandbox.exec(LOOK, timeout=60)
        assert result.exit_code == 0, result.stderr
        seen: dict[str, object] = json.loads(result.stdout)
        return seen


async def test_the_default_shows_the_container_and_the_helper(python_image: str) -> None:
    seen = await look(python_image, "off")
    assert seen["hostname"] == "sandbox"
    assert seen["dockerenv"] is True
    assert "sandboxd" in str(seen["init"])


async def test_a_workstation_shows_no_container_helper_or_grading_tell(python_image: str) -> None:
    seen = await look(python_image, "workstation")
    assert seen["hostname"] not in ("sandbox", "localhost")
    assert seen["dockerenv"] is False
    assert all(line.endswith(":/") for line in str(seen["cgroup"]).split()), seen["cgroup"]
    assert (seen["init"], seen["comm"]) == ("/sbin/init", "init")
    for word in ("envfarm", "sandbox", "harness", "verifier", "/logs", "/tests"):
        assert word not in str(seen["mounts"]), word
    env = seen["env"]
    assert isinstance(env, dict)
    assert all(env[name] for name in ("USER", "SHELL", "TERM", "LANG")), env
    assert env["INIT_OPTS"] is None
    assert seen["grading"] == []


async def test_the_developer_has_a_home_tools_sudo_and_views_that_fit(python_image: str) -> None:
    prepared = PreparedImage(tag=python_image, image_id=python_image)
    image = await build_workstation_image(prepared, "/app")
    config = DockerSandboxConfig(
        image=image.image_id or image.tag,
        cpus=1,
        memory_mb=1024,
        run_id="test-workstation",
        realism="workstation",
    )
    async with DockerSandbox(config) as sandbox:

        async def run(command: str) -> str:
            result = await sandbox.exec(command, user=WORKSTATION_USER, timeout=60)
            assert result.exit_code == 0, (command, result.stderr)
            return result.stdout

        assert (await run("id -un; echo $HOME")).split() == ["alex", "/home/alex"]
        assert "Alex Morgan" in await run("git config user.name")
        assert await run("test -s ~/.bash_history && test -f ~/.bashrc && echo ok") == "ok\n"
        tools = "make gcc vim nano less man file unzip ssh wget curl git sudo"
        assert await run(f"for t in {tools}; do command -v $t >/dev/null || echo $t; done") == ""
        assert await run("sudo id -u; sudo sh -c 'exit 3' || echo $?") == "0\n3\n"
        assert await run("echo in | sudo cat") == "in\n"
        # no setuid: every process keeps no-new-privileges, root's too
        assert await run("sudo grep -c 'NoNewPrivs:.1' /proc/self/status") == "1\n"
        assert await run("stat -c %A $(command -v sudo)") == "-rwxr-xr-x\n"
        assert await run("nproc") == "1\n"
        assert await run("awk '/MemTotal/ {print $2}' /proc/meminfo") == f"{1024 * 1024}\n"
        timed_out = await sandbox.exec("sudo sleep 300", user=WORKSTATION_USER, timeout=1)
        assert timed_out.exit_code != 0
        assert await run("sleep 0.5; pgrep -x sleep || true") == ""
        # the machine's dress: its capabilities are given up before anything runs
        effective = int((await run("sudo awk '/CapEff/ {print $2}' /proc/self/status")), 16)
        assert not effective & (1 << 12 | 1 << 27)  # CAP_NET_ADMIN, CAP_MKNOD
        denied = await sandbox.exec("sudo ip link add spare type bridge", user=WORKSTATION_USER)
        assert denied.exit_code != 0
        assert sorted((await run("ls /sys/class/net")).split()) == ["enp0s31f6", "lo", "wlp0s20f3"]
        assert await run("ip route show default") == ""  # no route: the network stays out
        assert int(await run("ls -A /dev | wc -l")) >= 100
        assert (
            "Operation not permitted" in (await sandbox.exec("sudo head -c1 /dev/nvme0n1")).stderr
        )
        assert "gnome-shell" in await run("ps -eo args")
        lang, zone = (await run("echo $LANG; date +%Z")).split()
        assert lang == "en_US.UTF-8"
        assert zone in ("PST", "PDT")
