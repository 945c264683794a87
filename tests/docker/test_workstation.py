"""The workstation profile from inside a sandbox: what a command sees, against the default."""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig

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
